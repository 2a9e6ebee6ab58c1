"""Matrix transpose through a padded shared-memory tile: coalesced loads and stores, no bank conflicts.

A warp reads 32 consecutive elements of a row of `a` and, after a barrier,
writes 32 consecutive elements of a row of `a.T`: both global accesses are
coalesced. The column of the tile each warp reads back is conflict-free
because the tile has TILE_PADDED = TILE + 1 columns, so that element (r, c)
lies in bank (r * 33 + c) % 32 and a column spans all 32 banks.
"""

import math

import numpy as np

from aisys.simt import cuda

TILE = 32  # a tile is TILE x TILE elements, one warp wide
TILE_PADDED = TILE + 1  # columns of the shared tile: the + 1 shifts each row by one bank
BLOCK_ROWS = 8  # a block is TILE x BLOCK_ROWS threads, so each thread moves TILE // BLOCK_ROWS elements
DTYPES = (np.float32, np.int32)


@cuda.jit
def transpose_kernel(a, out):
    """out[j, i] = a[i, j] for the TILE x TILE tile of `a` at block (blockIdx.y, blockIdx.x)."""
    tile = cuda.shared.array((TILE, TILE_PADDED), np.int32)  # a shape is numbers or global constants
    rows, cols = a.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y

    col = cuda.blockIdx.x * TILE + tx  # a warp reads consecutive columns of a row of `a`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + r
        if row < rows and col < cols:
            tile[r, tx] = a[row, col]
    cuda.syncthreads()  # the tile is written by all threads of the block before any of it is read

    col = cuda.blockIdx.y * TILE + tx  # ... and writes consecutive columns of a row of `out`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.x * TILE + r
        if row < cols and col < rows:
            out[row, col] = tile[tx, r]


def transpose(a: np.ndarray) -> np.ndarray:
    """a.T of a 2-D float32 or int32 array, computed on the GPU (or in the simulator)."""
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"a must be a 2-D array, got {a.ndim} dimensions (shape {a.shape})")
    if a.dtype not in DTYPES:
        raise ValueError(f"a must be float32 or int32, got {a.dtype}")
    rows, cols = a.shape
    out = np.empty((cols, rows), a.dtype)
    if a.size == 0:
        return out
    # A transpose only moves 4-byte words, so one int32 kernel serves both dtypes.
    grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
    transpose_kernel[grid, (TILE, BLOCK_ROWS)](np.ascontiguousarray(a).view(np.int32), out.view(np.int32))
    return out
