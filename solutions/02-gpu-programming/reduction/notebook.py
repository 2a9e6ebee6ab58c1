# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: parallel reduction, one stage at a time
#
# **You will learn** how a block of threads adds its numbers in $\log_2$ steps through
# shared memory, why the way threads are paired at each step decides warp divergence and
# bank conflicts, how warp shuffles finish the job without shared memory or barriers, and
# how many blocks and a second pass sum an array of any length.
#
# A sum is the simplest **reduction**; a maximum, a norm, the denominator of a softmax and
# every loss are the same pattern. It reads $4n$ bytes of `float32` for $n - 1$ additions,
# so, like vector addition, it runs at the speed of memory: on an H100 (3.35 TB/s), $2^{26}$
# floats (268 MB) take at least 80 µs. The work of the exercise is to lose nothing on the
# way.
#
# A block of `BLOCK = 256` threads sums its 256 elements as a **tree**: each thread loads one
# element into shared memory, then at each level half of the remaining threads add a pair,
# and after $\log_2 256 = 8$ levels `sdata[0]` holds the block's sum. A level reads what
# other threads wrote at the level before, so `cuda.syncthreads()` separates the levels.
#
# The kernels run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Inside `with simt.profile()` it
# reports, per source line, the sectors of global memory, the shared-memory wavefronts and
# bank conflicts, the branches where the lanes of a warp went different ways (divergence),
# and any race or barrier error. Write the functions yourself: when grading, the reference
# `aisys.cuda_kernels` cannot be imported.
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
import functools
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("02-gpu-programming/reduction", globals())

BLOCK = 256  # threads per block; stages 1 and 2 sum BLOCK consecutive elements per block
WARP = 32
FULL_MASK = 0xFFFFFFFF  # a shuffle's mask: every lane of the warp takes part

# %% [markdown]
# ## 1. Stage 1: a tree in shared memory
#
# Which threads add which pairs? The first idea, **interleaved addressing**, pairs
# neighbours: at level `s = 1, 2, 4, ...`, thread `tid` adds `sdata[tid + s]` into
# `sdata[tid]` when `tid % (2 * s) == 0`. It is right, but the busy threads are 0, 2, 4, ...
# at the first level, 0, 4, 8, ... at the next: every warp has busy and idle lanes, so every
# warp **diverges** (runs the `if` with some lanes masked off) at every level, and no warp
# ever finishes early. Run it and read the `branch` lines of the report:

# %%
@cuda.jit
def block_sums_interleaved_kernel(x, partial):
    sdata = cuda.shared.array(BLOCK, np.float32)
    tid = cuda.threadIdx.x
    sdata[tid] = x[cuda.blockIdx.x * BLOCK + tid]  # full blocks only, to keep it short
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        if tid % (2 * s) == 0:  # busy threads 0, 2s, 4s, ...: spread over every warp
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]


example = np.arange(4 * BLOCK, dtype=np.float32)
interleaved_sums = np.zeros(4, np.float32)
with simt.profile() as interleaved_launches:
    block_sums_interleaved_kernel[4, BLOCK](example, interleaved_sums)
assert (interleaved_sums == example.reshape(4, BLOCK).sum(axis=1)).all()
print(interleaved_launches[-1])

# %% [markdown]
# Packing the busy threads as `index = 2 * s * tid` (`if index < BLOCK: sdata[index] +=
# sdata[index + s]`) removes most of the divergence, but now the lanes of a warp touch words
# `2s` apart. Shared memory has 32 **banks** of 4 bytes (word `k` is in bank `k % 32`), and a
# bank serves one word at a time: lanes 2s words apart meet 2s to a bank, a **bank
# conflict** that serialises the warp's access.
#
# **Sequential addressing** fixes both: at level `s = BLOCK // 2, BLOCK // 4, ..., 1`, the
# busy threads are `0 .. s-1` and thread `tid` adds `sdata[tid + s]` into `sdata[tid]`:
#
# ```
# for s = BLOCK/2 .. 1 (halving):
#     if tid < s: sdata[tid] += sdata[tid + s]
#     syncthreads()
# ```
#
# Whole warps are busy or idle together until `s < 32`, and a warp reads 32 consecutive
# words, one per bank. Write it:
#
# - `tree_kernel(dtype)` makes the kernel for one dtype. A shared array's dtype is fixed when
#   numba compiles the kernel, so declare it `cuda.shared.array(BLOCK, dtype)` inside a
#   function of the dtype; `functools.cache` keeps one kernel per dtype (what a C++ template
#   does).
# - Block `b` sums `x[b * BLOCK : (b + 1) * BLOCK]`; each thread loads one element (a warp
#   reads 32 consecutive ones: coalesced). The last block may be partial: threads past the
#   end of `x` store 0 and **still take part in every barrier**; never `return` before a
#   `cuda.syncthreads()`.
# - `block_sums_tree(x)` launches `ceil(n / BLOCK)` blocks of `BLOCK` threads and returns the
#   array of block sums, in `x`'s dtype (`float32`, `int32` or `int64`); for `n = 0`, an
#   empty array, without a launch.

# %% tags=["solution"]
@functools.cache
def tree_kernel(dtype):
    """The stage-1 kernel for arrays of `dtype`."""

    @cuda.jit
    def block_sums_tree_kernel(x, partial):
        """partial[b] = x[b * BLOCK] + ... + x[b * BLOCK + BLOCK - 1], elements past the end counting as 0."""
        ### BEGIN SOLUTION
        sdata = cuda.shared.array(BLOCK, dtype)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * BLOCK + tid
        if i < x.size:  # the last block may be partial; zeros do not change the sum
            sdata[tid] = x[i]
        else:
            sdata[tid] = 0
        cuda.syncthreads()  # every element is in shared memory before any thread reads another's
        s = BLOCK // 2
        while s > 0:
            if tid < s:  # sequential addressing: the busy threads are 0..s-1, whole warps at a time
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()  # this level's sums are written before the next level reads them
            s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]
        ### END SOLUTION

    return block_sums_tree_kernel


def block_sums_tree(x):
    """The sum of each BLOCK-element chunk of x (the last may be shorter), in x's dtype."""
    ### BEGIN SOLUTION
    blocks = math.ceil(x.size / BLOCK)
    partial = np.zeros(blocks, x.dtype)
    if blocks:
        tree_kernel(x.dtype.type)[blocks, BLOCK](x, partial)
    return partial
    ### END SOLUTION


# %% tags=["check"]
check("block_sums_tree")
### BEGIN HIDDEN TESTS
check("block_sums_tree", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Compare the two reports on the same input: the same sums, with an eighth of the divergent
# branches (left: the levels `s < 32`, where one warp works, `if tid == 0`, and the bounds
# check of a ragged block), a third of the shared-memory requests, and no bank conflicts.

# %%
with simt.profile() as sequential_launches:
    assert (block_sums_tree(example) == interleaved_sums).all()
for name, report in [("interleaved", interleaved_launches[-1]), ("sequential (yours)", sequential_launches[-1])]:
    print(f"{name:20} divergent branches {report['branches']['divergent']:4d}   "
          f"bank conflicts {report['shared']['bank_conflicts']:4d}   "
          f"shared requests {report['shared']['requests']:4d}")

# %% tags=["check"]
check("block_sums_tree_sequential")
### BEGIN HIDDEN TESTS
check("block_sums_tree_sequential", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("block_sums_tree_race_free")
### BEGIN HIDDEN TESTS
check("block_sums_tree_race_free", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Stage 2: the last warp in registers
#
# From `s = 16` on, only warp 0 works, yet each level still costs a shared load, a shared
# store and a barrier for the whole block. Inside a warp, lanes can read each other's
# registers: `cuda.shfl_down_sync(FULL_MASK, v, offset)` returns the `v` of lane
# `lane + offset` (its own `v` where that lane would be past 31). So once the tree is down
# to 32 values, warp 0 loads them (`v = sdata[tid]`) and does
#
# ```
# for offset in (16, 8, 4, 2, 1):
#     v += cuda.shfl_down_sync(FULL_MASK, v, offset)
# ```
#
# after which lane 0 holds the block's sum: five instructions, no shared memory, no barrier.
# (Old code drops the barriers of the last warp and relies on its lanes running in
# lockstep, through `volatile` shared memory. Since Volta the lanes of a warp are scheduled
# independently: that is a race. Use shuffles, or `cuda.syncwarp()` between the steps.)
#
# Write `warp_sum`, `store_block_sum` (the tree down to 32 values, then `warp_sum`; stage 3
# uses it too), the stage-2 kernel and `block_sums_shuffle(x)`, which returns what
# `block_sums_tree` does. Device functions (`@cuda.jit(device=True)`) take shared arrays as
# arguments and may call `cuda.syncthreads()`; every thread of the block must call such a one.

# %% tags=["solution"]
@cuda.jit(device=True)
def warp_sum(value):
    """The sum of `value` over the 32 lanes of a warp, in lane 0 (every lane of the warp must call it)."""
    ### BEGIN SOLUTION
    for offset in (16, 8, 4, 2, 1):
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)  # lane i adds lane i + offset's value
    return value
    ### END SOLUTION


@cuda.jit(device=True)
def store_block_sum(sdata, out, index):
    """out[index] = sdata[0] + ... + sdata[BLOCK - 1]; every thread of the block calls it, after a barrier."""
    ### BEGIN SOLUTION
    tid = cuda.threadIdx.x
    s = BLOCK // 2
    while s >= WARP:  # the tree down to 32 values, in sdata[0..32)
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid < WARP:  # one warp adds the last 32 values in registers
        total = warp_sum(sdata[tid])
        if tid == 0:
            out[index] = total
    ### END SOLUTION


@functools.cache
def shuffle_kernel(dtype):
    """The stage-2 kernel for arrays of `dtype`."""

    @cuda.jit
    def block_sums_shuffle_kernel(x, partial):
        """partial[b] = the sum of block b's BLOCK elements, as in stage 1, the last warp's levels in registers."""
        ### BEGIN SOLUTION
        sdata = cuda.shared.array(BLOCK, dtype)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * BLOCK + tid
        if i < x.size:
            sdata[tid] = x[i]
        else:
            sdata[tid] = 0
        cuda.syncthreads()
        store_block_sum(sdata, partial, cuda.blockIdx.x)
        ### END SOLUTION

    return block_sums_shuffle_kernel


def block_sums_shuffle(x):
    """The sum of each BLOCK-element chunk of x, in x's dtype: block_sums_tree's result, with shuffles."""
    ### BEGIN SOLUTION
    blocks = math.ceil(x.size / BLOCK)
    partial = np.zeros(blocks, x.dtype)
    if blocks:
        shuffle_kernel(x.dtype.type)[blocks, BLOCK](x, partial)
    return partial
    ### END SOLUTION


# %% tags=["check"]
check("block_sums_shuffle")
### BEGIN HIDDEN TESTS
check("block_sums_shuffle", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The shared-memory requests drop by a third: the five levels that only warp 0 worked on,
# and their barriers, are gone.

# %%
with simt.profile() as shuffle_launches:
    assert (block_sums_shuffle(example) == interleaved_sums).all()
for name, report in [("tree", sequential_launches[-1]), ("tree + shuffles", shuffle_launches[-1])]:
    print(f"{name:16} shared requests {report['shared']['requests']:4d}   "
          f"divergent branches {report['branches']['divergent']:4d}")

# %% tags=["check"]
check("block_sums_shuffle_warp")
### BEGIN HIDDEN TESTS
check("block_sums_shuffle_warp", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Stage 3: the whole array
#
# Block sums leave `ceil(n / BLOCK)` numbers to add. `reduce_sum(x)` returns the sum of all
# of `x` in two launches of one kernel:
#
# 1. A grid of `min(MAX_BLOCKS, ceil(n / BLOCK))` blocks. Each thread first adds its elements
#    in a register with a grid-stride loop (`for i in range(cuda.grid(1), x.size,
#    cuda.gridsize(1))`: a warp reads 32 consecutive elements a step), stores its sum in
#    `sdata[tid]`, and the block reduces them with `store_block_sum` into `partial[b]`. Adding
#    many elements per thread first makes the tree's share of the work small.
# 2. The same kernel with one block on `partial`: its grid-stride loop takes any number of
#    partial sums.
#
# How many blocks? Enough to keep every multiprocessor busy. On an H100 (132 of them), this
# kernel summed $2^{26}$ floats at 270 GB/s with 32 blocks, 8 % of the memory bandwidth,
# and at 2.5 TB/s with 528 (four per multiprocessor). `MAX_BLOCKS = 32` keeps the simulator
# quick; on a GPU, size the grid from the device (`cuda.get_current_device().MULTIPROCESSOR_COUNT`).
#
# Keep `partial` on the GPU between the launches: `cuda.to_device(x)`,
# `cuda.device_array(blocks, x.dtype)`, and `.copy_to_host()` for the one number at the end.
# Start a thread's sum at `dtype(0)` so that it keeps the data's dtype. Return the sum as a
# number of `x`'s dtype (`dtype(0)` for an empty `x`). (A single launch where each block adds
# its sum with `cuda.atomic.add` works too; floating-point sums then come out in a different
# order each run.)

# %% tags=["solution"]
MAX_BLOCKS = 32  # blocks of the first pass: few, for the simulator's sake (see above)


@functools.cache
def sum_kernel(dtype):
    """The kernel of both passes of reduce_sum, for arrays of `dtype`."""

    @cuda.jit
    def reduce_sum_kernel(x, partial):
        """partial[b] = the sum of the elements block b's threads step over in a grid-stride loop."""
        ### BEGIN SOLUTION
        sdata = cuda.shared.array(BLOCK, dtype)
        acc = dtype(0)
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # a warp reads 32 consecutive elements a step
            acc += x[i]
        sdata[cuda.threadIdx.x] = acc
        cuda.syncthreads()
        store_block_sum(sdata, partial, cuda.blockIdx.x)
        ### END SOLUTION

    return reduce_sum_kernel


def reduce_sum(x):
    """The sum of all of x, in its dtype: one pass of many blocks, then one of a single block."""
    ### BEGIN SOLUTION
    if x.size == 0:
        return x.dtype.type(0)
    kernel = sum_kernel(x.dtype.type)
    blocks = min(MAX_BLOCKS, math.ceil(x.size / BLOCK))
    d_partial = cuda.device_array(blocks, x.dtype)
    kernel[blocks, BLOCK](cuda.to_device(x), d_partial)
    d_total = cuda.device_array(1, x.dtype)
    kernel[1, BLOCK](d_partial, d_total)
    return d_total.copy_to_host()[0]
    ### END SOLUTION


# %% tags=["check"]
check("reduce_sum")
### BEGIN HIDDEN TESTS
check("reduce_sum", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The two launches on 5000 elements: 20 blocks whose threads add about one element each
# before the tree, then one block for the 20 partial sums.

# %%
with simt.profile() as sum_launches:
    assert reduce_sum(np.ones(5000, np.float32)) == 5000
for report in sum_launches:
    print(report)

# %% tags=["check"]
check("reduce_sum_profile")
### BEGIN HIDDEN TESTS
check("reduce_sum_profile", hidden=True)
### END HIDDEN TESTS
