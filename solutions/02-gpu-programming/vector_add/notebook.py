# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: vector addition with a grid-stride loop
#
# **You will learn** how a CUDA kernel names the element each thread works on, why the
# threads of a warp should touch consecutive elements, and how a **grid-stride loop** lets
# one launch of a fixed size cover an array of any length.
#
# A kernel runs as a **grid** of **blocks**, each of `blockDim.x` threads; the hardware runs
# the threads of a block in **warps** of 32 consecutive threads that execute one instruction
# together. Thread `threadIdx.x` of block `blockIdx.x` has the global index
#
# $$\texttt{cuda.grid(1)} = \texttt{blockIdx.x} \cdot \texttt{blockDim.x} + \texttt{threadIdx.x},$$
#
# and the grid has `cuda.gridsize(1) = gridDim.x * blockDim.x` threads in all. With one
# thread per element you would size the grid for the data: `ceil(n / 128)` blocks. A
# grid-stride loop sizes it for the machine instead: thread `t` of a grid of `G` threads
# adds elements `t, t + G, t + 2G, ...` until it passes the end. One kernel then serves
# every `n`, a thread's setup is paid once for many elements, and the `range`'s bound is
# the bounds check. (On an H100, a few blocks for each of its 132 multiprocessors keep
# it busy; here the grid is 4 blocks of 128 threads, so an array of 5000 elements takes
# each thread about ten steps.)
#
# Memory moves in **sectors** of 32 bytes. In each step of the loop, the 32 lanes of a warp
# read `x[i]` for 32 consecutive `i`: 128 bytes, 4 sectors, every byte used. The access is
# *coalesced*. Vector addition does one addition per 12 bytes moved, so it runs at the
# speed of memory: on an H100 (3.35 TB/s) adding two vectors of $2^{26}$ `float32` moves
# 805 MB and takes at least 0.24 ms. Coalescing decides whether it gets there.
#
# The kernels below run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Inside `with simt.profile()`,
# the simulator reports for every source line the sectors each access touched against the
# fewest that would hold its bytes. Write the functions yourself: when grading, the
# reference `aisys.cuda_kernels` cannot be imported.
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
import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("02-gpu-programming/vector_add", globals())


# %% [markdown]
# ## 1. The kernel and its launch
#
# Write `vector_add_kernel(x, y, out)`, which sets `out[i] = x[i] + y[i]` for every `i` with
# a grid-stride loop, and `vector_add(x, y)`, which allocates `out` (`np.empty_like(x)`),
# launches the kernel as `vector_add_kernel[blocks, THREADS](x, y, out)` and returns `out`.
#
# - Launch `min(MAX_BLOCKS, ceil(n / THREADS))` blocks: never more than `MAX_BLOCKS`,
#   whatever `n`, and no block that would find nothing to do.
# - For `n = 0` return the empty `out` without launching: a grid of zero blocks is an
#   invalid launch on a GPU.
# - `x` and `y` are 1-D, of one length and dtype (`float32` or `int32`); a launch with numpy
#   arrays copies `out` back when the kernel ends.

# %% tags=["solution"]
THREADS = 128  # threads per block: four warps
MAX_BLOCKS = 4  # blocks in the grid at most: 512 threads, whatever n


@cuda.jit
def vector_add_kernel(x, y, out):
    """out[i] = x[i] + y[i] for every i, each thread stepping through the array by the size of the grid."""
    ### BEGIN SOLUTION
    start = cuda.grid(1)  # this thread's first element
    stride = cuda.gridsize(1)  # threads in the whole grid
    for i in range(start, out.size, stride):  # the loop's bound is the bounds check
        out[i] = x[i] + y[i]
    ### END SOLUTION


def vector_add(x, y):
    """x + y for two 1-D arrays of one length and dtype, added on the GPU by a grid of at most MAX_BLOCKS blocks."""
    ### BEGIN SOLUTION
    out = np.empty_like(x)
    if x.size == 0:
        return out  # a grid of zero blocks is an invalid launch
    blocks = min(MAX_BLOCKS, -(-x.size // THREADS))  # ceil(n / THREADS), at most MAX_BLOCKS
    vector_add_kernel[blocks, THREADS](x, y, out)
    return out
    ### END SOLUTION


# %% tags=["check"]
check("vector_add")
### BEGIN HIDDEN TESTS
check("vector_add", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. What the launch looked like
#
# The report of a launch on 5000 elements: 512 threads, so each took about ten steps; the
# `global` lines show the sectors of each load and store against the fewest that would
# hold their bytes. Both checks below read such a report: one that the grid is smaller
# than the data and that no element is handled twice, one that every access is coalesced.

# %%
x = np.arange(5000, dtype=np.float32)
with simt.profile() as launches:
    assert (vector_add(x, x) == 2 * x).all()
print(launches[-1])

# %% tags=["check"]
check("vector_add_grid_stride")
### BEGIN HIDDEN TESTS
check("vector_add_grid_stride", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("vector_add_coalesced")
### BEGIN HIDDEN TESTS
check("vector_add_coalesced", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. What coalescing buys
#
# Another way to split the work: give each thread one contiguous chunk of
# `ceil(n / threads)` elements. Every element is still added once, but in each step the
# lanes of a warp are a chunk apart, 40 bytes for n = 5000, so every lane's 4 bytes cost a
# sector of 32: the warp moves 32 sectors where 4 would do. Compare the efficiency of the
# two kernels.

# %%
@cuda.jit
def vector_add_chunked_kernel(x, y, out):
    chunk = -(-out.size // cuda.gridsize(1))
    start = cuda.grid(1) * chunk
    for i in range(start, min(start + chunk, out.size)):
        out[i] = x[i] + y[i]


out = np.empty_like(x)
with simt.profile() as chunked_launches:
    vector_add_chunked_kernel[MAX_BLOCKS, THREADS](x, x, out)
for name, report in [("grid-stride (yours)", launches[-1]), ("chunk per thread", chunked_launches[-1])]:
    print(f"{name:20} global efficiency {report['global']['efficiency']:5.0%}   "
          f"sectors {report['global']['sectors']:5d}   ideal {report['global']['ideal_sectors']:5d}")
