"""Counts tiles with N // tile_n, dropping the last, partial row and column of tiles that hang over C's edge."""

FAILS = ["tile_reads", "traffic", "best_tiling"]


def tile_reads(M, N, K, tile_m, tile_n):
    return M * K * (N // tile_n) + K * N * (M // tile_m)
