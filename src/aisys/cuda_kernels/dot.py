"""Dot product of two float32 vectors: a grid-stride loop of products per thread, a tree per block, a second pass.

Thread t of a grid of G threads adds x[i] * y[i] for i = t, t + G, t + 2G, ...
in a register: in each step the lanes of a warp read 32 consecutive elements
of each vector (coalesced), and one grid, sized for the machine, serves any n.
Each block then reduces its threads' sums as the reduction does
(`reduction.store_block_sum`: a tree in shared memory, the last warp in
registers) into partial[b], and a second launch of the reduction's own kernel,
one block, adds the partial sums.
"""

import math

import numpy as np

from aisys.simt import cuda

from .reduction import BLOCK, store_block_sum, sum_kernel

MAX_BLOCKS = 2  # blocks of the first pass at most: few, for the simulator; a GPU wants a few per multiprocessor


@cuda.jit
def dot_kernel(x, y, partial):
    """partial[b] = the sum of x[i] * y[i] over the elements block b's threads step over in a grid-stride loop."""
    sdata = cuda.shared.array(BLOCK, np.float32)
    acc = np.float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # a warp reads 32 consecutive elements a step
        acc += x[i] * y[i]
    sdata[cuda.threadIdx.x] = acc
    cuda.syncthreads()  # every thread's sum is in shared memory before the tree reads them
    store_block_sum(sdata, partial, cuda.blockIdx.x)


def dot(x: np.ndarray, y: np.ndarray) -> np.float32:
    """x . y for two 1-D float32 arrays of one length, as a float32 number (0 for empty vectors)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 1 or x.dtype != np.float32:
        raise ValueError(f"x must be a 1-D float32 array, got {x.ndim} dimensions of {x.dtype}")
    if y.shape != x.shape or y.dtype != np.float32:
        raise ValueError(f"y must be a float32 array of x's shape {x.shape}, got shape {y.shape} of {y.dtype}")
    if x.size == 0:
        return np.float32(0)
    blocks = min(MAX_BLOCKS, math.ceil(x.size / BLOCK))
    d_partial = cuda.device_array(blocks, np.float32)
    dot_kernel[blocks, BLOCK](np.ascontiguousarray(x), np.ascontiguousarray(y), d_partial)
    d_total = cuda.device_array(1, np.float32)
    sum_kernel(np.float32)[1, BLOCK](d_partial, d_total)  # one block adds the partial sums
    return d_total.copy_to_host()[0]
