"""Bitonic sort on the GPU: one kernel launch per stage of Batcher's sorting network.

Batcher's bitonic network (1968) sorts N = 2**m elements in m (m + 1) / 2
stages. Stage (k, j), for k = 2, 4, ..., N and j = k/2, k/4, ..., 1, compares
every element i with its partner i ^ j (i with bit j flipped) and puts the
pair in order: ascending where bit k of i is 0, descending where it is 1. The
stages for one k merge the sorted runs of k/2 elements, which alternate in
direction and so form bitonic runs of k elements, into sorted runs of k; the
last k = N leaves all of it ascending.

Within a stage, the N/2 pairs are disjoint, so N threads (one per element,
the lower one of each pair does the compare-exchange) need no
synchronisation; between stages they all do, and the end of a kernel launch
is the barrier across the whole grid. Hence one launch per stage.

Lengths that are not a power of two are padded to the next one with the
largest value of the dtype (+inf for floats): padding sorts after every real
element, so the first n elements of the sorted padded array are the answer.

`bitonic_sort_block` runs the same network inside one block, for a power of
two n <= BLOCK_MAX: the block loads the array into shared memory, thread i
does element i's compare-exchanges, and cuda.syncthreads() is the barrier
between stages, so the whole sort is one launch that reads and writes global
memory once per element.
"""

import functools
import math

import numpy as np

from aisys.simt import cuda

THREADS = 256  # threads per block
BLOCK_MAX = 1024  # threads of one block: the longest array bitonic_sort_block sorts
DTYPES = (np.float32, np.int32)


@cuda.jit
def bitonic_stage_kernel(a, j, k):
    """One stage (k, j): order each pair (i, i ^ j), ascending if i & k == 0, else descending."""
    i = cuda.grid(1)
    if i < a.size:
        partner = i ^ j
        if partner > i:  # the lower element of each pair does the compare-exchange
            ascending = (i & k) == 0
            if (a[i] > a[partner]) == ascending:
                a[i], a[partner] = a[partner], a[i]


def padding_value(dtype) -> float | int:
    """The value that sorts after every element of `dtype`: +inf, or the largest integer."""
    dtype = np.dtype(dtype)
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def stages(n: int) -> int:
    """Launches bitonic_sort makes for n elements: m (m + 1) / 2 for the padded size 2**m."""
    m = max(n - 1, 0).bit_length()
    return m * (m + 1) // 2


def bitonic_sort(x: np.ndarray) -> np.ndarray:
    """A sorted copy of a 1-D float32 or int32 array (ascending), by a bitonic network on the GPU."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D array, got {x.ndim} dimensions (shape {x.shape})")
    if x.dtype not in DTYPES:
        raise ValueError(f"x must be float32 or int32, got {x.dtype}")
    n = x.size
    size = 1 << max(n - 1, 0).bit_length()  # the next power of two >= n
    padded = np.full(size, padding_value(x.dtype), x.dtype)
    padded[:n] = x
    d_a = cuda.to_device(padded)
    blocks = math.ceil(size / THREADS)
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            bitonic_stage_kernel[blocks, THREADS](d_a, j, k)
            j //= 2
        k *= 2
    return d_a.copy_to_host()[:n]


@functools.cache
def block_kernel(dtype):
    """The one-block kernel for one dtype (numba needs the shared array's dtype when it compiles the kernel)."""

    @cuda.jit
    def bitonic_block_kernel(a):
        """Sort a (a power of two elements, one thread each) in shared memory, all stages in one launch."""
        s = cuda.shared.array(BLOCK_MAX, dtype)
        i = cuda.threadIdx.x
        s[i] = a[i]
        k = 2
        while k <= a.size:
            j = k // 2
            while j >= 1:
                cuda.syncthreads()  # the stage before (or the load) is written before this stage reads it
                partner = i ^ j
                if partner > i:  # the lower element of each pair does the compare-exchange
                    ascending = (i & k) == 0
                    if (s[i] > s[partner]) == ascending:
                        s[i], s[partner] = s[partner], s[i]
                j //= 2
            k *= 2
        cuda.syncthreads()
        a[i] = s[i]

    return bitonic_block_kernel


def bitonic_sort_block(x: np.ndarray) -> np.ndarray:
    """A sorted copy (ascending) of a 1-D float32 or int32 array whose length is a power of two up to BLOCK_MAX,
    by the bitonic network in the shared memory of one block: one launch of x.size threads."""
    x = np.asarray(x)
    if x.ndim != 1 or x.dtype not in DTYPES:
        raise ValueError(f"x must be a 1-D float32 or int32 array, got {x.ndim} dimensions of {x.dtype}")
    n = x.size
    if n < 1 or n > BLOCK_MAX or n & (n - 1):
        raise ValueError(f"x must have a power of two elements from 1 to {BLOCK_MAX} (one block), got {n}")
    a = np.array(x)
    block_kernel(x.dtype.type)[1, n](a)
    return a
