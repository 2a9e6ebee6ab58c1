# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: sum reduction in a thread block
#
# **You will learn** to write the interview's classic kernel from memory: a block adds its numbers as a
# tree in shared memory, pairing threads so that no warp diverges and no two lanes meet in a bank
# (*sequential addressing*), and the blocks combine their sums with one atomic each. The chapter 2
# exercise `02-gpu-programming/reduction` teaches it step by step; here it is timed.
#
# **The conventions, all of them:**
# - `reduce_sum(x)` takes a 1-D `float32` numpy array of any length `n >= 0` (not a multiple of the
#   block in general) and returns its sum as a `float32` number; for `n = 0` it returns `0.0` without
#   launching anything.
# - **One launch**: `reduce_sum_kernel[blocks, BLOCK](x, out)` with `BLOCK = 256` threads per block
#   (fixed below), `blocks = ceil(n / BLOCK)`, and `out` a one-element `float32` array that the host
#   zeroes before the launch and reads after it. No second pass.
# - Thread `t` of block `b` loads `x[b * BLOCK + t]` into `sdata[t]` (a warp reads 32 consecutive
#   elements: coalesced), or `0` where that index is past the end; every thread takes part in every
#   `cuda.syncthreads()` (no early `return`).
# - The block sums `sdata` with **sequential addressing**: for `s = BLOCK/2, BLOCK/4, ..., 1`, the threads
#   `t < s` add `sdata[t + s]` into `sdata[t]`, a barrier between levels. Then thread 0 adds the block's
#   sum into `out[0]` with **one** `cuda.atomic.add` per block.
# - The sum is checked against the exact sum (in float64) with an absolute tolerance of
#   `1e-5 * sum(|x|)`: blocks add in any order, so float32 roundings differ from numpy's.
# - **What the launch report must show** (the checks read it, comparing with the reference tree on the
#   same input): no race and no barrier error; global loads as coalesced as the reference's; at most
#   twice the reference's divergent branches (interleaved addressing, `if t % (2 * s) == 0`, makes
#   every warp diverge at every level); no more shared-memory bank conflicts than the reference (none);
#   at most one global atomic per block.
#
# The kernel runs in a simulator on the CPU (on a machine with an NVIDIA GPU, `aisys.simt.cuda` is
# numba-cuda). `with simt.profile() as launches:` around a launch gives its report: per source line,
# global sectors, shared-memory wavefronts and bank conflicts, divergent branches, and any race or
# barrier error. The checks read the report from a run of their own: they take the source of the
# cells you ran, keep imports, `def`s and assignments to names, and run them again in a fresh
# simulator. Only the kernel dialect runs there (arithmetic, indexing, `if`/`for`/`while`, `def`
# decorated with `@cuda.jit` or `@functools.cache`; imports of `numpy`, `math`, `functools` and
# `aisys.simt`; no `class`, `with`, `global`, no name starting with `_`): a definition outside it fails
# the check that needs it, naming its line.

# %%
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("09-drills/reduction_simt", globals())

BLOCK = 256  # threads per block, and elements each block sums


# %% tags=["solution"]
@cuda.jit
def reduce_sum_kernel(x, out):
    """out[0] += the sum of this block's BLOCK elements of x (0 past the end), by a tree in shared memory."""
    ### BEGIN SOLUTION
    sdata = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    if i < x.size:  # the last block may be partial: zeros leave the sum unchanged
        sdata[t] = x[i]
    else:
        sdata[t] = 0
    cuda.syncthreads()  # every element is in shared memory before any thread reads another's
    s = BLOCK // 2
    while s > 0:
        if t < s:  # sequential addressing: threads 0..s-1 are busy, whole warps at a time
            sdata[t] += sdata[t + s]
        cuda.syncthreads()  # this level is written before the next one reads it
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, sdata[0])
    ### END SOLUTION


def reduce_sum(x):
    """The sum of the float32 array x, as a float32 number: one launch of reduce_sum_kernel."""
    ### BEGIN SOLUTION
    out = np.zeros(1, np.float32)
    if x.size:
        reduce_sum_kernel[math.ceil(x.size / BLOCK), BLOCK](x, out)
    return out[0]
    ### END SOLUTION


# %% tags=["check"]
check("reduce_sum")
### BEGIN HIDDEN TESTS
check("reduce_sum", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your kernel's report on 1000 elements (four blocks, the last one ragged): read the `branch` lines
# (divergent warps), the `shared` lines (wavefronts and bank conflicts) and the `atomic` line.

# %%
with simt.profile() as launches:
    total = reduce_sum(np.ones(1000, np.float32))
assert total == 1000, total
print(launches[-1])

# %% tags=["check"]
check("reduce_sum_race_free")
### BEGIN HIDDEN TESTS
check("reduce_sum_race_free", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("reduce_sum_sequential_addressing")
### BEGIN HIDDEN TESTS
check("reduce_sum_sequential_addressing", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("reduce_sum_one_atomic_per_block")
### BEGIN HIDDEN TESTS
check("reduce_sum_one_atomic_per_block", hidden=True)
### END HIDDEN TESTS
