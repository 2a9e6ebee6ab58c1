"""Histogram of small integers with per-block privatised bins in shared memory.

Each block counts its share of the input (a grid-stride loop) into its own
bins in shared memory, with shared-memory atomics, then adds each bin to the
global result with one global atomic. Global atomics drop from one per element
to one per bin per block, and the contended ones, when many elements fall in
one bin, are the fast on-chip kind.
"""

import math

import numpy as np

from aisys.simt import cuda

BINS_MAX = 256  # shared bins per block: 1 KiB of int32
THREADS = 256  # threads per block
MAX_BLOCKS = 32  # enough to fill a small GPU; the grid-stride loop covers any input size


@cuda.jit
def histogram_kernel(values, counts):
    """counts[v] += number of elements equal to v, for v in [0, counts.size)."""
    bins = counts.size
    local = cuda.shared.array(BINS_MAX, np.int32)
    for b in range(cuda.threadIdx.x, bins, cuda.blockDim.x):
        local[b] = 0
    cuda.syncthreads()  # every bin is zero before any thread adds to it

    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        cuda.atomic.add(local, values[i], 1)
    cuda.syncthreads()  # every element of the block is counted before the bins are read

    for b in range(cuda.threadIdx.x, bins, cuda.blockDim.x):
        if local[b] != 0:
            cuda.atomic.add(counts, b, local[b])


def histogram(values: np.ndarray, bins: int) -> np.ndarray:
    """Counts (int32, length `bins`) of each value of the int32 array `values`, all in [0, bins)."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype != np.int32:
        raise ValueError(f"values must be a 1-D int32 array, got {values.ndim} dimensions of {values.dtype}")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not 1 <= bins <= BINS_MAX:
        raise ValueError(f"bins must be an integer from 1 to {BINS_MAX}, got {bins!r}")
    if values.size and not (0 <= values.min() and values.max() < bins):
        raise ValueError(f"values must lie in [0, bins) = [0, {bins}), got values from {values.min()} "
                         f"to {values.max()}")
    counts = np.zeros(int(bins), np.int32)
    if values.size == 0:
        return counts
    blocks = min(MAX_BLOCKS, math.ceil(values.size / THREADS))
    histogram_kernel[blocks, THREADS](np.ascontiguousarray(values), counts)
    return counts
