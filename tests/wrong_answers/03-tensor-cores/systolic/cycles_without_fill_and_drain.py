"""Counts only the streaming cycles of each tile (K; or the load and M), forgetting the wavefront's fill and drain."""

import math

FAILS = ["cycles"]


def cycles(M, N, K, rows, cols, dataflow):
    tiles_n = math.ceil(N / cols)
    if dataflow == "os":
        return math.ceil(M / rows) * tiles_n * K
    return tiles_n * K + math.ceil(K / rows) * tiles_n * M
