# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: prefix sum (scan)
#
# **You will learn** to compute a prefix sum in parallel with a *work-efficient* scan in
# shared memory, why every level of it needs a barrier, and how a scan of many blocks is
# built from a scan of each block plus a scan of the blocks' totals.
#
# The **inclusive** scan of $x$ is $y_i = x_0 + x_1 + \dots + x_i$: `np.cumsum(x)`. (The
# *exclusive* scan, $y_i = x_0 + \dots + x_{i-1}$ with $y_0 = 0$, is the same shifted by one;
# it is what you need to find where each block writes its output, for instance.) Here every
# scan is **inclusive** and keeps the dtype of `x`: the answer is `np.cumsum(x, dtype=x.dtype)`
# (plain `np.cumsum` widens `int32` to `int64`; a CUDA kernel adding `int32` values wraps).
#
# A scan looks sequential: $y_i$ needs $y_{i-1}$. It is not: addition is associative, so the
# sums can be grouped as a tree. Two trees are classic:
#
# - **Hillis–Steele** (1986): at stride $d = 1, 2, 4, \dots$, every element adds the one $d$
#   places before it. After $\log_2 n$ levels each $y_i$ holds its whole prefix. Simple, but
#   it does $\approx n \log_2 n$ additions where a loop does $n$: on 1024 elements, ten times
#   the work.
# - **Brent–Kung** (1982), the tree of **Blelloch**'s scan (1990): an *up-sweep* builds a
#   reduction tree, a *down-sweep* spreads the partial sums back. Fewer than $2n$ additions in
#   $2 \log_2 n$ levels: **work-efficient**, like the loop.
#
# The kernels below run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Inside `with simt.profile()`, the
# simulator counts every warp-level load and store ("request") of shared and global memory,
# and reports races. Write the functions yourself: when grading, the reference
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

check = checker("02-gpu-programming/scan", globals())

SECTION = 256  # elements each block scans
DTYPES = (np.float32, np.int32, np.int64)


# %% [markdown]
# ## 1. Hillis–Steele, to see the problem
#
# One block, one thread per element, a scan of up to `SECTION` elements. At each level a
# thread reads `s[i - stride]`, which another thread overwrites at the same level: the kernel
# keeps **two buffers** and reads one while writing the other (*double buffering*), with a
# barrier between levels. Without the second buffer it would race. Note the shared-memory
# requests in the report: every warp loads and stores at every one of the 8 levels.

# %%
@cuda.jit
def hillis_steele_kernel(x, out):
    """out = inclusive scan of x (at most SECTION float32 elements, one block of SECTION threads)."""
    buffers = cuda.shared.array((2, SECTION), np.float32)
    i = cuda.threadIdx.x
    buffers[0, i] = x[i] if i < x.size else 0
    read = 0
    stride = 1
    while stride < SECTION:
        cuda.syncthreads()  # the level before has written buffers[read]
        value = buffers[read, i]
        if i >= stride:
            value += buffers[read, i - stride]
        buffers[1 - read, i] = value
        read = 1 - read
        stride *= 2
    if i < x.size:
        out[i] = buffers[read, i]


example = np.random.default_rng(0).standard_normal(SECTION).astype(np.float32)
hillis_steele_out = np.empty_like(example)
with simt.profile() as hillis_steele_launches:
    hillis_steele_kernel[1, SECTION](example, hillis_steele_out)
assert np.allclose(hillis_steele_out, np.cumsum(example), atol=1e-4)
print(hillis_steele_launches[-1])

# %% [markdown]
# ## 2. A work-efficient scan of each block
#
# `block_scan(x)` scans each chunk of `SECTION = 256` consecutive elements **on its own**:
# for chunk `b`, `out[256 b : 256 (b + 1)] = np.cumsum(x[256 b : 256 (b + 1)])`. A block of
# `THREADS = 128` threads handles one chunk, two elements per thread:
#
# 1. Load the chunk into a shared array `s` of `SECTION` elements: thread `t` loads elements
#    `t` and `t + THREADS` (consecutive threads, consecutive addresses: coalesced). The last
#    block may be partial: beyond the end of `x`, store `0`, which changes no sum.
# 2. **Up-sweep**, for `stride = 1, 2, 4, ..., SECTION // 2`: thread `t` takes
#    `k = (t + 1) * 2 * stride - 1` and, if `k < SECTION`, does `s[k] += s[k - stride]`.
#    Afterwards `s[k]` holds the sum of the `2 * stride` elements ending at `k`, and
#    `s[SECTION - 1]` the sum of the chunk.
# 3. **Down-sweep**, for `stride = SECTION // 4, ..., 2, 1`: with the same `k`, if
#    `k + stride < SECTION`, do `s[k + stride] += s[k]`: the sum up to `k` flows into the
#    middle of the next run.
# 4. Write `s` back to `out` (within bounds), and `totals[blockIdx.x] = s[SECTION - 1]`:
#    section 3 needs each block's total.
#
# Each level reads what other threads wrote at the level before: put `cuda.syncthreads()`
# **between every two levels**, and let every thread reach every barrier (bounds checks go
# around the loads and stores, never around a barrier, and no thread returns early).
#
# A shared array's dtype is fixed when the kernel is compiled, and `block_scan` takes
# `float32`, `int32` and `int64`: `make_block_scan_kernel(dtype)` builds one kernel per dtype
# (numba compiles `dtype` in as a constant); `functools.cache` builds each only once. Call it
# as `make_block_scan_kernel(x.dtype.type)[blocks, THREADS](x, out, totals)`.
#
# `block_scan_device(d_x, d_out)` launches it on arrays already on the GPU and returns the
# device array of block totals (section 3 needs it); `block_scan(x)` copies `x` there with
# `cuda.to_device(x)`, makes `out` with `cuda.device_array(n, dtype)`, calls it and brings
# `out` back with `.copy_to_host()`. Kernels take numpy arrays too, but then every launch
# copies them there and back.

# %% tags=["solution"]
THREADS = SECTION // 2  # threads per block: each loads, scans and stores two elements


@functools.cache
def make_block_scan_kernel(dtype):
    """The kernel scanning each SECTION-element chunk of `x` into `out`, its total into `totals`, for one dtype."""

    @cuda.jit
    def block_scan_kernel(x, out, totals):
        """out = inclusive scan of each SECTION-element chunk of x; totals[b] = the sum of chunk b."""
        ### BEGIN SOLUTION
        s = cuda.shared.array(SECTION, dtype)
        t = cuda.threadIdx.x
        start = cuda.blockIdx.x * SECTION
        # Thread t moves elements t and t + THREADS: a warp touches 32 consecutive ones (coalesced).
        for k in range(t, SECTION, THREADS):
            if start + k < x.size:
                s[k] = x[start + k]
            else:
                s[k] = 0  # the last block may be partial: zeros leave the sums of real elements unchanged

        stride = 1
        while stride < SECTION:  # up-sweep
            cuda.syncthreads()  # the level before has written what this level reads
            k = (t + 1) * 2 * stride - 1  # consecutive threads take consecutive pairs: busy threads stay packed
            if k < SECTION:
                s[k] += s[k - stride]
            stride *= 2

        stride = SECTION // 4
        while stride > 0:  # down-sweep
            cuda.syncthreads()
            k = (t + 1) * 2 * stride - 1
            if k + stride < SECTION:
                s[k + stride] += s[k]
            stride //= 2
        cuda.syncthreads()

        for k in range(t, SECTION, THREADS):
            if start + k < x.size:
                out[start + k] = s[k]
        if t == 0:
            totals[cuda.blockIdx.x] = s[SECTION - 1]
        ### END SOLUTION

    return block_scan_kernel


def block_scan_device(d_x, d_out):
    """Launch the block scan of device array d_x into d_out; return the device array of the block totals."""
    ### BEGIN SOLUTION
    blocks = math.ceil(d_x.size / SECTION)
    d_totals = cuda.device_array(blocks, d_x.dtype)
    make_block_scan_kernel(d_x.dtype.type)[blocks, THREADS](d_x, d_out, d_totals)
    return d_totals
    ### END SOLUTION


def block_scan(x):
    """Inclusive scan of each SECTION-element chunk of a 1-D float32, int32 or int64 array, on its own."""
    ### BEGIN SOLUTION
    x = np.ascontiguousarray(x)
    if x.size == 0:
        return x.copy()
    d_out = cuda.device_array(x.size, x.dtype)
    block_scan_device(cuda.to_device(x), d_out)
    return d_out.copy_to_host()
    ### END SOLUTION


# %% tags=["check"]
check("block_scan")
### BEGIN HIDDEN TESTS
check("block_scan", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Across blocks
#
# After `block_scan`, element `i` of block `b` holds the sum from the start of its block. It
# is missing the totals of blocks `0 .. b-1`. Those are a prefix sum too: scan the array of
# block totals (with your own scan: it is an array like any other, one block long for up to
# 256 blocks, and the recursion handles more), giving `sums[b]` = the total of blocks
# `0 .. b`. Then a second kernel adds `sums[b - 1]` to every element of block `b >= 1`, one
# thread per element.
#
# `scan_device(d_x, d_out)` does all of this on device arrays, calling itself on the totals;
# `scan(x)` wraps it like `block_scan` and returns the inclusive scan of all of `x`, in its
# dtype. Empty input gives an empty result (a launch of zero blocks is an error in CUDA).

# %% tags=["solution"]
OFFSET_THREADS = 256  # threads per block of the kernel that adds the block offsets


@cuda.jit
def add_offsets_kernel(out, sums):
    """out[i] += sums[b - 1] for every element i of block b >= 1 (sums[b]: the total of blocks 0..b)."""
    ### BEGIN SOLUTION
    i = SECTION + cuda.grid(1)  # block 0 needs no offset
    if i < out.size:
        out[i] += sums[i // SECTION - 1]
    ### END SOLUTION


def scan_device(d_x, d_out):
    """Inclusive scan of device array d_x into d_out."""
    ### BEGIN SOLUTION
    d_totals = block_scan_device(d_x, d_out)
    if d_totals.size > 1:
        d_sums = cuda.device_array(d_totals.size, d_totals.dtype)
        scan_device(d_totals, d_sums)  # the totals of up to SECTION blocks take one more block, and so on
        rest = d_x.size - SECTION
        add_offsets_kernel[math.ceil(rest / OFFSET_THREADS), OFFSET_THREADS](d_out, d_sums)
    ### END SOLUTION


def scan(x):
    """Inclusive prefix sum of a 1-D float32, int32 or int64 array, in its dtype: np.cumsum(x, dtype=x.dtype)."""
    ### BEGIN SOLUTION
    x = np.ascontiguousarray(x)
    if x.size == 0:
        return x.copy()
    d_out = cuda.device_array(x.size, x.dtype)
    scan_device(cuda.to_device(x), d_out)
    return d_out.copy_to_host()
    ### END SOLUTION


# %% tags=["check"]
check("scan")
### BEGIN HIDDEN TESTS
check("scan", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Races, barriers and work
#
# The checks below run your functions in the simulator: the first wants no race and no
# barrier error on any input, partial last blocks included; the second counts the
# shared- and global-memory requests of `block_scan` (warp-level loads and stores) and
# compares them with the reference's on the same input. A Hillis–Steele scan of each block
# makes about twice as many. The hardware issues loads and stores per warp: a warp with one
# busy lane costs a request as much as a full one, so the mapping `k = (t + 1) * 2 * stride - 1`,
# which keeps the busy threads in as few warps as possible, matters as much as the count of
# additions (testing `t % (2 * stride) == 0` instead spreads them over every warp).

# %% tags=["check"]
check("scan_race_free")
### BEGIN HIDDEN TESTS
check("scan_race_free", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("scan_work_efficient")
### BEGIN HIDDEN TESTS
check("scan_work_efficient", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. What the work costs
#
# Both scans below handle the same 256 elements. Hillis–Steele keeps all 8 warps busy at
# all 8 levels; in Brent–Kung the busy threads halve at each level of the up-sweep (and
# double in the down-sweep), and since they are packed at the low thread indices, whole
# warps fall idle and issue nothing.
#
# **Bank conflicts.** At stride `d`, the busy lanes of a warp touch `s[k]` with `k` spaced
# `2d` words apart, so the 32 lanes share `32 / 2d` of the 32 banks: a 2-way conflict at
# `d = 1`, 4-way at `d = 2`, and so on (the `bank_conflicts` in the report below). The
# classic fix (Harris, Sengupta and Owens, *GPU Gems 3*, ch. 39) pads the shared array with
# one spare word every 32 and stores index `k` at `k + k // 32`, which spreads strided
# accesses over more banks (on one block, 135 conflicts drop to 7). It is not graded here;
# try it.

# %%
with simt.profile() as block_scan_launches:
    assert np.allclose(block_scan(example), np.cumsum(example), atol=1e-4)
print(block_scan_launches[-1])
for name, launches in [("Hillis-Steele", hillis_steele_launches), ("Brent-Kung (yours)", block_scan_launches)]:
    shared = launches[-1]["shared"]
    print(f"{name:20} shared requests {shared['requests']:4d}   bank conflicts {shared['bank_conflicts']:4d}")

# %% [markdown]
# And a scan of many blocks: one `block_scan` launch per level of the recursion, one
# `add_offsets` launch per level, each listed in the profile.

# %%
many = np.arange(1, 3001, dtype=np.int64)
with simt.profile() as scan_launches:
    assert (scan(many) == np.cumsum(many)).all()
for launch in scan_launches:
    print(f"{launch['kernel']:20} grid {launch['grid'][0]:3d} x {launch['block'][0]:3d} threads")
