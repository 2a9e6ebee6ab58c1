"""Matrix transpose in CUDA C through a shared-memory tile padded to TILE + 1 columns: coalesced on both sides.

A block of TILE x BLOCK_ROWS threads moves one TILE x TILE tile: a warp reads 32
consecutive elements of a row of `a` into a row of the tile, and after a barrier reads
a column of the tile to write 32 consecutive elements of a row of `a.T`. Without the
padding, the 32 elements of a tile column would lie in one bank of shared memory (a
32-way bank conflict); with 33 columns, element (r, c) lies in bank (33 r + c) % 32.
"""

import numpy as np

from aisys import cuda_c

TILE = 32
BLOCK_ROWS = 8  # each thread moves TILE // BLOCK_ROWS = 4 elements
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y, which counts tiles down the rows of `a`

SOURCE = r"""
#define TILE 32
#define BLOCK_ROWS 8

// out (cols x rows) = the transpose of a (rows x cols), both row-major; block (x, y) moves tile (y, x) of a.
extern "C" __global__ void transpose_tiled(const float* __restrict__ a, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];  // the + 1 puts the 32 elements of a tile column in 32 different banks
    int col = blockIdx.x * TILE + threadIdx.x;  // a warp reads 32 consecutive columns of a row of a: coalesced
    for (int r = threadIdx.y; r < TILE; r += BLOCK_ROWS) {
        int row = blockIdx.y * TILE + r;
        if (row < rows && col < cols) tile[r][threadIdx.x] = a[(long long)row * cols + col];
    }
    __syncthreads();  // the whole tile is in shared memory before any thread reads what another stored
    col = blockIdx.y * TILE + threadIdx.x;  // ... and writes 32 consecutive columns of a row of out: coalesced
    for (int r = threadIdx.y; r < TILE; r += BLOCK_ROWS) {
        int row = blockIdx.x * TILE + r;
        if (row < cols && col < rows) out[(long long)row * rows + col] = tile[threadIdx.x][r];
    }
}
"""


def transpose(a):
    """a.T, contiguous, of a 2-D float32 torch tensor, on a's device (computed on the GPU)."""
    import torch

    cuda_c.float32_tensor("a", a, ndim=2)
    rows, cols = a.shape
    if -(-rows // TILE) > MAX_GRID_Y or cols >= 2**31:
        raise ValueError(f"a must have at most {MAX_GRID_Y * TILE} rows and fewer than 2**31 columns, "
                         f"got shape {tuple(a.shape)}")
    cupy = cuda_c.require()
    if a.numel() == 0:
        return torch.empty((cols, rows), dtype=a.dtype, device=a.device)
    out = cupy.empty((cols, rows), cupy.float32)
    grid = (-(-cols // TILE), -(-rows // TILE))
    cuda_c.raw_kernel(SOURCE, "transpose_tiled")(grid, (TILE, BLOCK_ROWS),
                                                 (cuda_c.to_cupy(a), out, np.int32(rows), np.int32(cols)))
    return cuda_c.to_torch(out, a)
