"""Writes the tile back at its own block position, not the mirrored one: each tile is transposed, the grid is not."""

FAILS = ["transpose"]


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
    cuda.syncthreads()  # noqa: F821
    col = cuda.blockIdx.x * TILE + tx  # noqa: F821  (should be blockIdx.y)
    for r in range(ty, TILE, BLOCK_ROWS):  # noqa: F821
        row = cuda.blockIdx.y * TILE + r  # noqa: F821  (should be blockIdx.x)
        if row < cols and col < rows:
            out[row, col] = tile[tx, r]
