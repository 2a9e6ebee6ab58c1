"""Assumes every tile is full: on shapes that are not multiples of 32 the edge blocks index past the arrays."""

FAILS = ["transpose", "transpose_race_free"]


@cuda.jit  # noqa: F821
def transpose_kernel(a, out):
    tile = cuda.shared.array((TILE, TILE_PADDED), np.int32)  # noqa: F821
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # noqa: F821
    for r in range(ty, TILE, BLOCK_ROWS):  # noqa: F821
        tile[r, tx] = a[cuda.blockIdx.y * TILE + r, cuda.blockIdx.x * TILE + tx]  # noqa: F821
    cuda.syncthreads()  # noqa: F821
    for r in range(ty, TILE, BLOCK_ROWS):  # noqa: F821
        out[cuda.blockIdx.x * TILE + r, cuda.blockIdx.y * TILE + tx] = tile[tx, r]  # noqa: F821
