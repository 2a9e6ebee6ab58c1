"""Loads A and B once, as if every tile shared one copy: ignores that each row of tiles re-reads B and each column A."""

FAILS = ["tile_reads", "traffic", "best_tiling"]


def tile_reads(M, N, K, tile_m, tile_n):
    return M * K + K * N
