# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: odd-even transposition sort in one block
#
# **You will learn** to write the simplest parallel sort, and to get its three details right: how many
# phases it needs, the barrier between phases, and the last element, which has no neighbour to its right.
# With `n` threads, each phase compares neighbouring pairs, alternately starting at an even and at an odd
# index; it sorts any `n`, not only powers of two, in `n` phases of `O(1)` work each.
#
# **The conventions, all of them:**
# - `odd_even_sort(x)` takes a 1-D `float32` numpy array of `n` elements, `1 <= n <= BLOCK_MAX = 1024`
#   (one block) and **any** `n` (a power of two or not, odd or even), and returns a **new** array, `x`
#   sorted ascending, `float32`; `x` itself is left unchanged. Values are finite or `+-inf`, the largest
#   `float32` included, never NaN. Stability is not required: the result is compared exactly with
#   `np.sort(x)`, value by value (`-0.0` and `0.0` are equal and may come out in either order).
# - **One launch of one block of `n` threads**: `odd_even_sort_kernel[1, n](a)` on a copy `a` of `x`, sorted
#   in place. Thread `i = cuda.threadIdx.x` loads `a[i]` into `s[i]` of a
#   `cuda.shared.array(BLOCK_MAX, np.float32)`, all phases run on `s`, and thread `i` writes `s[i]` back at
#   the end: global memory is read once and written once per element.
# - **The phases**: `n` of them, `p = 0, 1, ..., n - 1`. In phase `p`, thread `i` with `i % 2 == p % 2`
#   compares `s[i]` with its right neighbour `s[i + 1]` and swaps them if `s[i] > s[i + 1]`: phase 0 orders
#   the pairs `(0, 1), (2, 3), ...`, phase 1 the pairs `(1, 2), (3, 4), ...`. Element `n - 1` has no right
#   neighbour: `s[n]` is not part of the array (the shared array is `BLOCK_MAX` long, so reading it is no
#   error, only whatever happens to lie there).
# - A phase reads what the phase before wrote: `cuda.syncthreads()` between phases (and after the load,
#   and before the write-back), reached by every thread: outside the `if` of the compare-exchange.
# - **What the launch report must show** (the checks compare with the reference on the same input): one
#   launch of one block of `n` threads; no race and no barrier error; no more global load and store
#   instructions than the reference's.
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

check = checker("09-drills/odd_even_sort_simt", globals())

BLOCK_MAX = 1024  # the most threads of one block: the longest array one block sorts


# %% tags=["solution"]
@cuda.jit
def odd_even_sort_kernel(a):
    """Sort a in place, one thread per element, n phases of neighbour compare-exchanges in shared memory."""
    ### BEGIN SOLUTION
    s = cuda.shared.array(BLOCK_MAX, np.float32)
    i = cuda.threadIdx.x
    n = a.size
    s[i] = a[i]
    for phase in range(n):
        cuda.syncthreads()  # the phase before (or the load) is written before this phase reads it
        if i % 2 == phase % 2 and i + 1 < n:  # the last element has no right neighbour
            if s[i] > s[i + 1]:
                s[i], s[i + 1] = s[i + 1], s[i]
    cuda.syncthreads()
    a[i] = s[i]
    ### END SOLUTION


def odd_even_sort(x):
    """A sorted copy (ascending) of a float32 array of 1 to BLOCK_MAX elements: one launch of x.size threads."""
    ### BEGIN SOLUTION
    a = x.copy()
    odd_even_sort_kernel[1, x.size](a)
    return a
    ### END SOLUTION


# %% tags=["check"]
check("odd_even_sort")
### BEGIN HIDDEN TESTS
check("odd_even_sort", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your kernel's report on 37 elements: one block, 37 phases; the `branch` line of the compare-exchange
# diverges in every warp and phase (half the lanes work), the price of one thread per element.

# %%
values = np.random.default_rng(0).standard_normal(37).astype(np.float32)
with simt.profile() as launches:
    assert (odd_even_sort(values) == np.sort(values)).all()
print(launches[-1])

# %% tags=["check"]
check("odd_even_sort_race_free")
### BEGIN HIDDEN TESTS
check("odd_even_sort_race_free", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("odd_even_sort_in_shared_memory")
### BEGIN HIDDEN TESTS
check("odd_even_sort_in_shared_memory", hidden=True)
### END HIDDEN TESTS
