"""Puts cuda.syncthreads() inside the bounds check: on a ragged tile, some threads of the block never reach it."""

FAILS = ["transpose", "transpose_race_free"]


@cuda.jit  # noqa: F821
def transpose_kernel(a, out):
    tile = cuda.shared.array((TILE, TILE_PADDED), np.int32)  # noqa: F821
    rows, cols = a.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # noqa: F821
    col = cuda.blockIdx.x * TILE + tx  # noqa: F821
    for r in range(ty, TILE, BLOCK_ROWS):  # noqa: F821
        row = cuda.blockIdx.y * TILE + r  # noqa: F821
        if row < rows and col < cols:
            tile[r, tx] = a[row, col]
    if cuda.blockIdx.y * TILE + ty < rows and col < cols:  # noqa: F821
        cuda.syncthreads()  # noqa: F821
    col = cuda.blockIdx.y * TILE + tx  # noqa: F821
    for r in range(ty, TILE, BLOCK_ROWS):  # noqa: F821
        row = cuda.blockIdx.x * TILE + r  # noqa: F821
        if row < cols and col < rows:
            out[row, col] = tile[tx, r]
