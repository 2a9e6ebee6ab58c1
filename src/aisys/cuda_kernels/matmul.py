"""Matrix multiply with shared-memory tiles: each element of A and B is loaded from global memory once per tile.

C (M x N) = A (M x K) @ B (K x N), float32, row-major. A block of TILE x TILE
threads owns a TILE x TILE tile of C, thread (ty, tx) its element (row, col).
It steps through K by TILE: the block loads a TILE x TILE tile of A and one
of B into shared memory (each thread one element of each, 0 outside the
matrices), waits at a barrier, adds the tiles' product into each thread's
accumulator from shared memory, and waits at a second barrier before the next
step overwrites the tiles that slower threads may still be reading.

Without tiles, each thread reads its whole row of A and column of B from
global memory: every element of A is loaded N times and every element of B M
times, 2 M N K loads. With tiles, every element of A is loaded once per
column of tiles, ceil(N / TILE) times, and every element of B ceil(M / TILE)
times: `aisys.gemm_tiling.tile_reads(M, N, K, TILE, TILE)`, a TILE-th of the
loads for the same arithmetic.
"""

import math

import numpy as np

from aisys.simt import cuda

TILE = 8  # a block is TILE x TILE threads; 16 or 32 on a GPU, 8 keeps the simulator quick


@cuda.jit
def matmul_kernel(a, b, c):
    """c[row, col] = sum over k of a[row, k] * b[k, col], one TILE x TILE tile of c per block."""
    tile_a = cuda.shared.array((TILE, TILE), np.float32)
    tile_b = cuda.shared.array((TILE, TILE), np.float32)
    M, K = a.shape
    N = b.shape[1]
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = np.float32(0)
    for start in range(0, K, TILE):
        # Each thread loads one element of each tile; zeros past the edges add nothing to the sums.
        if row < M and start + tx < K:
            tile_a[ty, tx] = a[row, start + tx]
        else:
            tile_a[ty, tx] = 0
        if start + ty < K and col < N:
            tile_b[ty, tx] = b[start + ty, col]
        else:
            tile_b[ty, tx] = 0
        cuda.syncthreads()  # both tiles are loaded before any thread reads them
        for k in range(TILE):
            acc += tile_a[ty, k] * tile_b[k, tx]
        cuda.syncthreads()  # every thread is done with the tiles before the next step overwrites them
    if row < M and col < N:
        c[row, col] = acc


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (float32) for float32 matrices a (M x K) and b (K x N), M, K, N >= 1, through shared-memory tiles."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or a.dtype != np.float32 or 0 in a.shape:
        raise ValueError(f"a must be a non-empty 2-D float32 array, got shape {a.shape} of {a.dtype}")
    if b.ndim != 2 or b.dtype != np.float32 or b.shape[0] != a.shape[1] or b.shape[1] == 0:
        raise ValueError(f"b must be a float32 array of shape ({a.shape[1]}, N >= 1) to multiply a of shape "
                         f"{a.shape}, got shape {b.shape} of {b.dtype}")
    M, N = a.shape[0], b.shape[1]
    c = np.empty((M, N), np.float32)
    grid = (math.ceil(N / TILE), math.ceil(M / TILE))  # x runs along the columns of c, y along its rows
    matmul_kernel[grid, (TILE, TILE)](np.ascontiguousarray(a), np.ascontiguousarray(b), c)
    return c
