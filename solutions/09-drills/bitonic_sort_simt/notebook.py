# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: bitonic sort in one block
#
# **You will learn** to write the GPU's classic sorting network from memory, the way an interview asks
# for it: one block sorts an array in shared memory, one thread per element, a barrier between stages,
# and each merge sorting its two halves in opposite directions. The chapter 2 exercise
# `02-gpu-programming/bitonic_sort` runs the same network over global memory, one launch per stage; here
# the whole sort is one launch.
#
# **The conventions, all of them:**
# - `bitonic_sort(x)` takes a 1-D `float32` numpy array whose length `n` is a power of two,
#   `1 <= n <= BLOCK_MAX = 1024` (one block), and returns a **new** array, `x` sorted ascending, `float32`;
#   `x` itself is left unchanged. Values are finite or `+-inf`, never NaN; `-0.0` and `0.0` are equal and
#   may come out in either order (no stability: equal values are indistinguishable). Results are compared
#   exactly with `np.sort(x)`.
# - **One launch of one block of `n` threads**: `bitonic_sort_kernel[1, n](a)` on a copy `a` of `x`, sorted
#   in place. Thread `i = cuda.threadIdx.x` loads `a[i]` into `s[i]` of a
#   `cuda.shared.array(BLOCK_MAX, np.float32)`, all stages run on `s`, and thread `i` writes `s[i]` back at
#   the end: global memory is read once and written once per element.
# - **The network**: for `k = 2, 4, ..., n` and, for each `k`, `j = k/2, k/4, ..., 1` (one *stage* per
#   `(k, j)`), thread `i` whose partner `l = i ^ j` is greater than `i` puts the pair `(s[i], s[l])` in
#   order: **ascending where `i & k == 0`, descending where `i & k != 0`**, so that neighbouring runs of
#   `k/2` sorted elements go up and then down (a *bitonic* run of `k`) before each merge. At the last
#   `k = n`, `i & n` is 0 for every thread: all of it ends ascending.
# - A stage reads what other threads wrote in the stage before: `cuda.syncthreads()` between stages (and
#   after the load, and before the write-back), reached by every thread: outside the `if` of the
#   compare-exchange.
# - **What the launch report must show** (the checks compare with the reference on the same input): one
#   launch of one block of `n` threads; no race and no barrier error; no more global load and store
#   instructions than the reference's (the data stays in shared memory between stages).
#
# The kernel runs in a simulator on the CPU (on a machine with an NVIDIA GPU, `aisys.simt.cuda` is
# numba-cuda); `with simt.profile() as launches:` gives each launch's report. The checks read the
# report from a run of their own: they take the source of the cells you ran, keep imports, `def`s and
# assignments to names, and run them again in a fresh simulator. Only the kernel dialect runs there
# (arithmetic, indexing, `if`/`for`/`while`, `def` decorated with `@cuda.jit` or `@functools.cache`;
# imports of `numpy`, `math`, `functools` and `aisys.simt`; no `class`, `with`, `global`, no name
# starting with `_`): a definition outside it fails the check that needs it, naming its line.

# %%
import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("09-drills/bitonic_sort_simt", globals())

BLOCK_MAX = 1024  # the most threads of one block: the longest array one block sorts


# %% tags=["solution"]
@cuda.jit
def bitonic_sort_kernel(a):
    """Sort a in place (a power of two elements, one thread each) through shared memory, every stage here."""
    ### BEGIN SOLUTION
    s = cuda.shared.array(BLOCK_MAX, np.float32)
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
    ### END SOLUTION


def bitonic_sort(x):
    """A sorted copy (ascending) of a float32 array of a power of two elements up to BLOCK_MAX: one launch."""
    ### BEGIN SOLUTION
    a = x.copy()
    bitonic_sort_kernel[1, x.size](a)
    return a
    ### END SOLUTION


# %% tags=["check"]
check("bitonic_sort")
### BEGIN HIDDEN TESTS
check("bitonic_sort", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your kernel's report on 64 elements: one block, 21 stages, one global load and one store per element.

# %%
values = np.random.default_rng(0).standard_normal(64).astype(np.float32)
with simt.profile() as launches:
    assert (bitonic_sort(values) == np.sort(values)).all()
print(launches[-1])

# %% tags=["check"]
check("bitonic_sort_race_free")
### BEGIN HIDDEN TESTS
check("bitonic_sort_race_free", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bitonic_sort_in_shared_memory")
### BEGIN HIDDEN TESTS
check("bitonic_sort_in_shared_memory", hidden=True)
### END HIDDEN TESTS
