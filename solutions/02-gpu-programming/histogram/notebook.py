# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a histogram with privatised bins
#
# **You will learn** how atomic operations let many threads add to the same counter without
# losing updates, why thousands of threads hammering a few global counters is slow, and how
# giving each block its own copy of the counters in shared memory (*privatisation*) removes
# almost all of that contention.
#
# `histogram(values, bins)` counts how many of the `int32` values equal each of `0 .. bins-1`,
# like `np.bincount(values, minlength=bins)`. In parallel, two threads that meet the same
# value must both add 1 to the same counter. A plain `counts[v] += 1` is three steps (read,
# add, write): both threads can read the same old count, and one update is lost. An atomic,
# `cuda.atomic.add(counts, v, 1)`, does the three steps as one indivisible operation, and
# returns the old value.
#
# Atomics on the same address are serialised. In global memory each one is carried out in
# the L2 cache, far from the thread; a histogram of skewed data (every value the same, the
# worst case) makes every thread of the GPU queue on one address. In shared memory an
# atomic stays inside the multiprocessor and contends only with the threads of one block.
#
# The kernels below run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Inside `with simt.profile()`, the
# simulator counts, line by line, the atomic operations of each launch. Write the functions
# yourself: when grading, the reference `aisys.cuda_kernels` cannot be imported.
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

check = checker("02-gpu-programming/histogram", globals())


# %% [markdown]
# ## 1. One global atomic per element
#
# The simplest correct kernel: a grid-stride loop in which each thread adds 1 to the global
# counter of each of its elements. Its results are right; the report shows what it costs:
# one global atomic for every element.

# %%
@cuda.jit
def histogram_global_kernel(values, counts):
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        cuda.atomic.add(counts, values[i], 1)


def histogram_global(values, bins):
    counts = np.zeros(bins, np.int32)
    histogram_global_kernel[4, 256](values, counts)
    return counts


example = np.random.default_rng(0).integers(0, 16, size=4096, dtype=np.int32)
with simt.profile() as global_launches:
    assert (histogram_global(example, 16) == np.bincount(example, minlength=16)).all()
print(global_launches[-1])

# %% [markdown]
# ## 2. Privatised bins
#
# Give each block its own bins in shared memory:
#
# 1. `local = cuda.shared.array(BINS_MAX, np.int32)`, with `BINS_MAX = 256` (the size of a
#    shared array is fixed when the kernel is compiled; use the first `bins` entries).
#    Shared memory is not initialised: the threads of the block set the bins to zero
#    together (thread `t` zeroes bins `t, t + blockDim.x, ...`).
# 2. `cuda.syncthreads()`: no thread may count into a bin that another thread has not
#    zeroed yet.
# 3. A grid-stride loop over the input, `cuda.atomic.add(local, values[i], 1)`: threads of
#    one block still meet on a bin, so the add must be atomic.
# 4. `cuda.syncthreads()`: every element of the block is counted before the bins are read.
# 5. Each thread adds its share of the bins to the global counts, one
#    `cuda.atomic.add(counts, b, local[b])` per bin: one global atomic per bin per block.
#
# Launch a fixed number of blocks (say at most 32 of 256 threads; fewer for a small input):
# the grid-stride loop covers any input size, and every extra block costs `bins` more global
# atomics. Return an integer array of length `bins`. `bins` is from 1 to 256, and every
# value lies in `[0, bins)`; an empty input has all counts zero (and launches nothing: a
# launch needs at least one block).

# %% tags=["solution"]
BINS_MAX = 256  # shared bins per block: 1 KiB of int32
THREADS = 256  # threads per block
MAX_BLOCKS = 32


@cuda.jit
def histogram_kernel(values, counts):
    """counts[v] += number of elements equal to v, counted in per-block bins in shared memory."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


def histogram(values, bins):
    """Counts of each value in [0, bins) of the int32 array `values`, with privatised bins."""
    ### BEGIN SOLUTION
    counts = np.zeros(bins, np.int32)
    if values.size == 0:
        return counts
    blocks = min(MAX_BLOCKS, math.ceil(values.size / THREADS))
    histogram_kernel[blocks, THREADS](values, counts)
    return counts
    ### END SOLUTION


# %% tags=["check"]
check("histogram")
### BEGIN HIDDEN TESTS
check("histogram", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("histogram_privatised")
### BEGIN HIDDEN TESTS
check("histogram_privatised", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("histogram_race_free")
### BEGIN HIDDEN TESTS
check("histogram_race_free", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. What privatisation buys
#
# On the same 4096 values, compare the atomics of the two kernels. The global kernel makes
# one global atomic per element; yours makes at most `blocks x bins`, and its per-element
# atomics are in shared memory.

# %%
with simt.profile() as private_launches:
    assert (histogram(example, 16) == np.bincount(example, minlength=16)).all()

for name, launches in [("global atomics", global_launches), ("privatised (yours)", private_launches)]:
    report = launches[-1]
    for line in report["lines"]:
        if line["kind"] == "atomic":
            print(f"{name:20} line {line['line']:3}: {line['operations']:5} {line['space']:6} atomic additions "
                  f"in {line['requests']:4} warp instructions   {line['source'].strip()}")
print()
print(private_launches[-1])
