"""Vector addition with a grid-stride loop: a grid of fixed size covers an array of any length.

out[i] = x[i] + y[i]. Thread t of a grid of G threads handles elements t,
t + G, t + 2G, ...: in each step the threads of a warp touch 32 consecutive
elements, so every load and store is coalesced, and one launch configuration
serves every n. Each thread does ceil(n / G) steps: the grid is sized for the
machine, not for the data. Here the machine is the simulator, so the grid is
small; a GPU wants a few blocks per multiprocessor (an H100 has 132).
"""

import math

import numpy as np

from aisys.simt import cuda

THREADS = 128  # threads per block: four warps
MAX_BLOCKS = 4  # blocks in the grid at most, whatever n: 512 threads, so larger arrays take several steps
DTYPES = (np.float32, np.float64, np.int32, np.int64)


@cuda.jit
def vector_add_kernel(x, y, out):
    """out[i] = x[i] + y[i] for every i, each thread stepping through the array by the size of the grid."""
    start = cuda.grid(1)  # this thread's first element: blockIdx.x * blockDim.x + threadIdx.x
    stride = cuda.gridsize(1)  # threads in the grid: gridDim.x * blockDim.x
    for i in range(start, out.size, stride):  # the loop's bound is the bounds check
        out[i] = x[i] + y[i]


def vector_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y for two 1-D arrays of one shape and dtype (float32, float64, int32 or int64), on the GPU."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 1 or x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"x and y must be 1-D arrays of one shape and dtype, got {x.shape} {x.dtype} "
                         f"and {y.shape} {y.dtype}")
    if x.dtype not in DTYPES:
        raise ValueError(f"x and y must be float32, float64, int32 or int64, got {x.dtype}")
    out = np.empty_like(x)
    if x.size == 0:
        return out  # a grid of zero blocks is an invalid launch on a GPU
    blocks = min(MAX_BLOCKS, math.ceil(x.size / THREADS))  # no block that would have nothing to do
    vector_add_kernel[blocks, THREADS](np.ascontiguousarray(x), np.ascontiguousarray(y), out)
    return out
