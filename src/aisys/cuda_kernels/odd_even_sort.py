"""Odd-even transposition sort in one block: n threads, n phases of compare-exchanges between neighbours.

Thread i of one block owns element i, loaded into shared memory. Phase p
compares neighbouring pairs: (0, 1), (2, 3), ... when p is even, (1, 2),
(3, 4), ... when p is odd; the lower thread of each pair swaps the two if
they are out of order. The pairs of a phase are disjoint, and a barrier
separates the phases. After n phases any array of n elements is sorted. An
element moves at most one place per phase, and the largest, say, needs up to
n - 1 phases to walk from the front to the back, starting one phase late if
it sits where the first phase does not touch it: n - 1 phases leave some
arrays unsorted (any n >= 3 elements in reverse order).

It does O(n^2) comparisons where a bitonic network does O(n log^2 n), but
works for any n, not only powers of two, and needs nothing but neighbours.
"""

import functools

import numpy as np

from aisys.simt import cuda

BLOCK_MAX = 1024  # threads of one block: the longest array one block sorts
DTYPES = (np.float32, np.int32)


@functools.cache
def odd_even_kernel(dtype):
    """The kernel for one dtype (numba needs the shared array's dtype when it compiles the kernel)."""

    @cuda.jit
    def odd_even_sort_kernel(a):
        """Sort a in place, one thread per element, n phases in shared memory."""
        s = cuda.shared.array(BLOCK_MAX, dtype)
        i = cuda.threadIdx.x
        n = a.size
        s[i] = a[i]
        for phase in range(n):
            cuda.syncthreads()  # the phase before (or the load) is written before this phase reads it
            if i % 2 == phase % 2 and i + 1 < n:  # the lower element of each pair; the last one has no partner
                if s[i] > s[i + 1]:
                    s[i], s[i + 1] = s[i + 1], s[i]
        cuda.syncthreads()
        a[i] = s[i]

    return odd_even_sort_kernel


def odd_even_sort(x: np.ndarray) -> np.ndarray:
    """A sorted copy (ascending) of a 1-D float32 or int32 array of 1 to BLOCK_MAX elements, by odd-even
    transposition in one block: one launch of x.size threads."""
    x = np.asarray(x)
    if x.ndim != 1 or x.dtype not in DTYPES:
        raise ValueError(f"x must be a 1-D float32 or int32 array, got {x.ndim} dimensions of {x.dtype}")
    if not 1 <= x.size <= BLOCK_MAX:
        raise ValueError(f"x must have 1 to {BLOCK_MAX} elements (one block, a thread each), got {x.size}")
    a = np.array(x)
    odd_even_kernel(x.dtype.type)[1, x.size](a)
    return a
