"""Writes back a row of the tile instead of a column: the tiles land in transposed places, but each one is
copied untransposed."""

FAILS = ["cuda_transpose"]

TRANSPOSE_SOURCE = TRANSPOSE_SOURCE.replace("= tile[threadIdx.x][r]", "= tile[r][threadIdx.x]")  # noqa: F821
assert "= tile[r][threadIdx.x]" in TRANSPOSE_SOURCE
