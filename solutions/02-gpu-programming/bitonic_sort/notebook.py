# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: bitonic sort
#
# **You will learn** how a *sorting network*, a fixed sequence of compare-exchange steps that
# does not depend on the data, maps onto thousands of GPU threads; why each step must finish
# everywhere before the next begins, and why ending a kernel launch is the way to make every
# thread of the grid wait; and how to sort any length with a network that only sorts powers
# of two.
#
# A **compare-exchange** of positions `(i, l)` puts the pair in order. Batcher's **bitonic**
# network (1968) sorts $N = 2^m$ elements in $m(m+1)/2$ *stages*, one for each pair
# $(k, j)$ of
#
# ```
# for k = 2, 4, 8, ..., N:            # merge sorted runs of k/2 into sorted runs of k
#     for j = k/2, k/4, ..., 1:       # compare elements j apart
#         for every i with partner l = i ^ j greater than i:     (in parallel)
#             ascending if i & k == 0, else descending
#             swap a[i] and a[l] if they are out of that order
# ```
#
# `i ^ j` flips bit `j` of `i`: each stage pairs the $N$ elements into $N/2$ disjoint pairs.
# Bit `k` of `i` alternates the direction from one run of `k` to the next, so that two
# neighbouring sorted runs, one ascending and one descending, form a *bitonic* sequence,
# which the stages `j = k/2, ..., 1` sort. At the last `k = N`, `i & N` is 0 for every `i`:
# all of it ends ascending. For $N = 1024$ that is 55 stages of 512 compare-exchanges: about
# $N \log_2^2 N / 4$ comparisons, more than a merge sort's $N \log_2 N$, but every stage is
# perfectly parallel and the same whatever the data.
#
# The kernels below run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Write the functions yourself: when
# grading, the reference `aisys.cuda_kernels` cannot be imported.
#
# **What is graded where.** The checks call your functions in your notebook for their
# results, but read coalescing, bank conflicts, divergence and races from a run of their
# own: the grader takes the source of the cells you ran, keeps their imports, `def`s and
# assignments to names (a later one replaces an earlier one; calls, loops and `with` blocks
# such as the demos are left out), and runs them again in a fresh process, in its own
# simulator, which nothing your notebook does can reach. Only the kernel dialect runs there:
# arithmetic, comparisons, indexing and slicing, tuples, lists, dicts, comprehensions,
# `if`/`for`/`while`, `try`/`raise`, lambdas, f-strings, `def` decorated with `@cuda.jit`,
# `@functools.cache` or `@functools.lru_cache` only; imports of `numpy`, `math`, `functools`
# and `aisys.simt`, with `cuda.*` and the numpy functions and array attributes these
# exercises use; no `class`, `with`, `global` or `yield`, no name or attribute starting with
# `_`, no `getattr`, `eval`, `open` or `type`. A check that needs a definition outside the
# dialect fails, naming its line, the construct and why: in this notebook as when grading.

# %%
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("02-gpu-programming/bitonic_sort", globals())

DTYPES = (np.float32, np.int32)

# %% [markdown]
# ## 1. The network on 8 elements
#
# The same network in numpy, printing the array after each stage. Watch the runs of 2, then
# 4, then 8 become sorted, alternately up and down until the last merge.

# %%
def bitonic_stages_numpy(a):
    a = a.copy()
    i = np.arange(a.size)
    k = 2
    while k <= a.size:
        j = k // 2
        while j >= 1:
            low = i[(i ^ j) > i]  # the lower element of each pair
            high = low ^ j
            ascending = (low & k) == 0
            swap = (a[low] > a[high]) == ascending
            a[low[swap]], a[high[swap]] = a[high[swap]], a[low[swap]]
            print(f"k={k} j={j}: {a}")
            j //= 2
        k *= 2
    return a


bitonic_stages_numpy(np.array([3, 7, 4, 8, 6, 2, 1, 5]))

# %% [markdown]
# ## 2. One kernel launch per stage
#
# Within a stage the pairs are disjoint, so one thread per element can work without waiting
# for any other: thread `i` (from `cuda.grid(1)`) does the compare-exchange of its pair if it
# is the lower of the two (`i ^ j > i`), and nothing otherwise. Between stages, every thread
# must see what every other thread of the **grid** wrote: `cuda.syncthreads()` only waits for
# the threads of one block. The end of a kernel launch is the barrier across the grid: launch
# the kernel once per stage, `bitonic_stage_kernel[blocks, THREADS](a, j, k)`, from a double
# loop on the host. Keep the array on the GPU between launches: `d = cuda.to_device(a)` once,
# `d.copy_to_host()` at the end (a launch with a numpy array would copy it there and back
# each time).
#
# **Any length.** The network sorts powers of two. For other lengths, pad `x` to the next
# power of two `N` with a value that sorts **after every real element**: `+inf` for
# `float32`, the largest `int32`, `np.iinfo(np.int32).max`, for integers. The padding then
# ends in the last `N - n` places and the first `n` elements of the result are the sorted
# `x`. (Padding with `0` would mix zeros into the data.) Return a new sorted array of the
# same dtype, an empty one for an empty `x`.

# %% tags=["solution"]
THREADS = 256  # threads per block


@cuda.jit
def bitonic_stage_kernel(a, j, k):
    """One stage (k, j): order each pair (i, i ^ j), ascending if i & k == 0, else descending."""
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < a.size:
        partner = i ^ j
        if partner > i:  # the lower element of each pair does the compare-exchange
            ascending = (i & k) == 0
            if (a[i] > a[partner]) == ascending:
                a[i], a[partner] = a[partner], a[i]
    ### END SOLUTION


def bitonic_sort(x):
    """A sorted copy of a 1-D float32 or int32 array (ascending), by a bitonic network on the GPU."""
    ### BEGIN SOLUTION
    n = x.size
    size = 1 << max(n - 1, 0).bit_length()  # the next power of two >= n
    padded = np.full(size, np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max, x.dtype)
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
    ### END SOLUTION


# %% tags=["check"]
check("bitonic_sort_power_of_two")
### BEGIN HIDDEN TESTS
check("bitonic_sort_power_of_two", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bitonic_sort_any_length")
### BEGIN HIDDEN TESTS
check("bitonic_sort_any_length", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Counting launches
#
# The check below runs `bitonic_sort` in the simulator and counts its launches: one per stage,
# $m(m+1)/2$ for $N = 2^m$ after padding (so 28 for 100 elements, padded to 128), and none
# for a single element. It also wants no error in any launch.

# %% tags=["check"]
check("bitonic_sort_launches")
### BEGIN HIDDEN TESTS
check("bitonic_sort_launches", hidden=True)
### END HIDDEN TESTS

# %%
values = np.random.default_rng(0).standard_normal(100).astype(np.float32)
with simt.profile() as launches:
    assert (bitonic_sort(values) == np.sort(values)).all()
print(f"{len(launches)} launches; the last one:")
print(launches[-1])

# %% [markdown]
# Every launch reads and writes the whole array in global memory; with $m(m+1)/2$ launches
# that is most of the cost. Both accesses of a warp are coalesced: for `j < 32` a warp's
# partners lie in its own 32 elements, for `j >= 32` in another run of 32 consecutive ones.
#
# **Going further** (not graded). The stages with `j` smaller than a block's share of the
# array only pair elements inside that share. A kernel that loads the share into shared
# memory can run all of them in one launch, with `cuda.syncthreads()` between stages, and
# so can the first stages `k <= 2 * THREADS` all together. For $N = 2^{20}$ and blocks of
# 512 elements that cuts 210 launches to 78, and the global-memory traffic with them. The
# launch check above counts the launches of the version with one launch per stage.
