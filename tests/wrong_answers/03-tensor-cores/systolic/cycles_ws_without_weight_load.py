"""Leaves out the cycles that shift each weight tile into a weight-stationary array."""

import math

FAILS = ["cycles"]


def cycles(M, N, K, rows, cols, dataflow):
    tiles_n = math.ceil(N / cols)
    if dataflow == "os":
        tiles_m = math.ceil(M / rows)
        return tiles_m * tiles_n * (K - 2) + tiles_n * M + tiles_m * N
    tiles_k = math.ceil(K / rows)
    return tiles_k * tiles_n * (M + rows - 2) + tiles_k * N
