"""Counts K + m + n - 1 cycles per tile: the index of the cycle after the last multiply-add, plus one."""

import math

FAILS = ["cycles"]


def cycles(M, N, K, rows, cols, dataflow):
    tiles_n = math.ceil(N / cols)
    if dataflow == "os":
        tiles_m = math.ceil(M / rows)
        return tiles_m * tiles_n * (K - 1) + tiles_n * M + tiles_m * N
    tiles_k = math.ceil(K / rows)
    return tiles_k * tiles_n * (M + rows - 1) + tiles_n * K + tiles_k * N
