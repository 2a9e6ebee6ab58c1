"""Drops the barrier between filling the tile and reading it: a warp reads a column of the tile, written by all
eight warps of the block, before the others have stored their rows."""

FAILS = ["cuda_transpose"]

TRANSPOSE_SOURCE = TRANSPOSE_SOURCE.replace(  # noqa: F821
    "    __syncthreads();  // the whole tile is in shared memory before any thread reads what another stored\n", "")
assert "__syncthreads" not in TRANSPOSE_SOURCE
