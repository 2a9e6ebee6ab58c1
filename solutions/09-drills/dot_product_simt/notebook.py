# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: dot product with a grid-stride loop
#
# **You will learn** to write a dot product the way a GPU wants it: a grid of a fixed size steps through
# vectors of any length (a *grid-stride loop*, in which the lanes of a warp read consecutive elements:
# coalesced), each thread adds its products in a register, and each block adds its threads' sums
# without a race before one atomic per block. It is the reduction with a multiply in front, and the
# kernel under every `torch.dot`, norm and cosine similarity.
#
# **The conventions, all of them:**
# - `dot(x, y)` takes two 1-D `float32` numpy arrays of one length `n >= 0` and returns `x . y` as a
#   `float32` number; `0.0` for `n = 0`, without launching anything.
# - **One launch**: `dot_kernel[blocks, THREADS](x, y, out)` with `THREADS = 256` threads per block and
#   `blocks = min(MAX_BLOCKS, ceil(n / THREADS))`, `MAX_BLOCKS = 2` (both fixed below: a GPU wants a few
#   blocks per multiprocessor, the simulator few threads), and `out` a one-element `float32` array zeroed
#   by the host.
# - **Grid-stride loop**: the thread of global index `g = cuda.grid(1)` multiplies and adds
#   `x[i] * y[i]` for `i = g, g + G, g + 2G, ... < n`, where `G = cuda.gridsize(1)` is the number of
#   threads in the grid, in a `float32` register. Not a contiguous chunk per thread: a warp's 32 lanes
#   would then read 32 elements a chunk apart, each in a sector of its own.
# - Each block sums its threads' registers in shared memory (a tree, `cuda.syncthreads()` between
#   levels; every thread reaches every barrier), then thread 0 adds the block's sum into `out[0]` with
#   **one** `cuda.atomic.add` per block.
# - The result is checked against the exact dot product (float64) with an absolute tolerance of
#   `1e-5 * sum(|x * y|)`: float32 additions in another order round differently.
# - **What the launch report must show** (the checks compare with the reference's on the same input):
#   at most `MAX_BLOCKS` blocks; global loads as coalesced as the reference's (the report's global
#   efficiency, needed / moved sectors); no race and no barrier error; at most one global atomic per
#   block. A race in shared memory can give the right sum here, where the simulator runs threads one
#   after the other: the report finds it anyway.
#
# The kernel runs in a simulator on the CPU (on a machine with an NVIDIA GPU, `aisys.simt.cuda` is
# numba-cuda); `with simt.profile() as launches:` gives each launch's report. The checks read the
# report from a run of their own: they take the source of the cells you ran, keep imports, `def`s and
# assignments to names, and run them again in a fresh simulator. Only the kernel dialect runs there
# (arithmetic, indexing, `if`/`for`/`while`, `def` decorated with `@cuda.jit` or `@functools.cache`;
# imports of `numpy`, `math`, `functools` and `aisys.simt`; no `class`, `with`, `global`, no name
# starting with `_`): a definition outside it fails the check that needs it, naming its line.

# %%
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("09-drills/dot_product_simt", globals())

THREADS = 256  # threads per block
MAX_BLOCKS = 2  # blocks in the grid at most, whatever n: the grid-stride loop covers the rest


# %% tags=["solution"]
@cuda.jit
def dot_kernel(x, y, out):
    """out[0] += the sum of x[i] * y[i] over the elements this block's threads step over."""
    ### BEGIN SOLUTION
    sdata = cuda.shared.array(THREADS, np.float32)
    t = cuda.threadIdx.x
    acc = np.float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # a warp reads 32 consecutive elements a step
        acc += x[i] * y[i]
    sdata[t] = acc
    cuda.syncthreads()  # every thread's sum is in shared memory before the tree reads them
    s = THREADS // 2
    while s > 0:
        if t < s:
            sdata[t] += sdata[t + s]
        cuda.syncthreads()  # this level is written before the next one reads it
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, sdata[0])
    ### END SOLUTION


def dot(x, y):
    """x . y for two float32 vectors of one length, as a float32 number: one launch of dot_kernel."""
    ### BEGIN SOLUTION
    out = np.zeros(1, np.float32)
    if x.size:
        dot_kernel[min(MAX_BLOCKS, math.ceil(x.size / THREADS)), THREADS](x, y, out)
    return out[0]
    ### END SOLUTION


# %% tags=["check"]
check("dot")
### BEGIN HIDDEN TESTS
check("dot", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your kernel's report on 2048 elements: two blocks of 256 threads, four elements per thread. The
# `global load` lines should show as many sectors as the data needs (efficiency 100 %).

# %%
with simt.profile() as launches:
    value = dot(np.ones(2048, np.float32), np.full(2048, 0.5, np.float32))
assert value == 1024, value
print(launches[-1])

# %% tags=["check"]
check("dot_coalesced")
### BEGIN HIDDEN TESTS
check("dot_coalesced", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("dot_block_sums")
### BEGIN HIDDEN TESTS
check("dot_block_sums", hidden=True)
### END HIDDEN TESTS
