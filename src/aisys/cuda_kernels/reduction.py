"""Parallel sum reduction in three stages: a shared-memory tree per block, its last warp in registers, two passes.

Stage 1, `block_sums_tree`: block b loads its BLOCK consecutive elements into
shared memory and halves them, level after level, with *sequential
addressing*:

    for s = BLOCK/2, BLOCK/4, ..., 1:   if tid < s: sdata[tid] += sdata[tid + s]
                                        syncthreads()

The busy threads are always threads 0..s-1: whole warps work or idle
together (no divergence while s >= 32), and the 32 lanes of a warp touch 32
consecutive words, one in each bank (no bank conflicts). The *interleaved*
form, `if tid % (2*s) == 0: sdata[tid] += sdata[tid + s]` for s = 1, 2, 4,
..., adds the same numbers but leaves every warp half idle at the first level
and diverging at every level after.

Stage 2, `block_sums_shuffle`: the tree stops at 32 values; one warp adds
those in registers with `cuda.shfl_down_sync` (lane i reads lane i + offset's
value), which needs neither shared memory nor barriers: the last five levels,
where only one warp works, cost five instructions each instead of a shared
load, a shared store and a block-wide barrier.

Stage 3, `reduce_sum`: a grid of at most MAX_BLOCKS blocks steps through the
whole array (each thread adds its elements in a register first, a coalesced
grid-stride loop), each block reduces its threads' sums as in stage 2, and a
second launch of the same kernel with one block adds the blocks' sums.

Sums are in the dtype of the data, as in a CUDA kernel templated on it:
integers wrap on overflow like np.sum(x, dtype=x.dtype), and float32 sums are
rounded in a different order than numpy's, so they agree to float32 precision.
"""

import functools
import math

import numpy as np

from aisys.simt import cuda

BLOCK = 256  # threads per block; each stage-1 and stage-2 block sums BLOCK consecutive elements
WARP = 32
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in the shuffle
# Blocks of the first pass of reduce_sum: few, so that the simulator is quick. On an H100 (132 multiprocessors)
# the first pass summed 2**26 float32 at 270 GB/s with 32 blocks and at 2.5 TB/s with 528 (numba-cuda, 2026-11).
MAX_BLOCKS = 32
DTYPES = (np.float32, np.float64, np.int32, np.int64)


@functools.cache
def tree_kernel(dtype):
    """The stage-1 kernel for one dtype (numba needs the shared array's dtype when it compiles the kernel)."""

    @cuda.jit
    def block_sums_tree_kernel(x, partial):
        """partial[b] = x[b*BLOCK] + ... + x[b*BLOCK + BLOCK - 1] (elements past the end count as 0)."""
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

    return block_sums_tree_kernel


@cuda.jit(device=True)
def warp_sum(value):
    """The sum of `value` over the 32 lanes of a warp, in lane 0 (every lane must call it)."""
    for offset in (16, 8, 4, 2, 1):
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)  # lane i adds lane i + offset's value
    return value


@cuda.jit(device=True)
def store_block_sum(sdata, out, index):
    """out[index] = sdata[0] + ... + sdata[BLOCK - 1]; every thread of the block calls it, after a barrier."""
    tid = cuda.threadIdx.x
    s = BLOCK // 2
    while s >= WARP:  # the tree down to 32 values, in sdata[0..32)
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid < WARP:  # one warp adds the last 32 values in registers: no shared memory, no barrier
        total = warp_sum(sdata[tid])
        if tid == 0:
            out[index] = total


@functools.cache
def shuffle_kernel(dtype):
    """The stage-2 kernel for one dtype."""

    @cuda.jit
    def block_sums_shuffle_kernel(x, partial):
        """partial[b] = the sum of block b's BLOCK elements, as in stage 1, the last warp's levels in registers."""
        sdata = cuda.shared.array(BLOCK, dtype)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * BLOCK + tid
        if i < x.size:
            sdata[tid] = x[i]
        else:
            sdata[tid] = 0
        cuda.syncthreads()
        store_block_sum(sdata, partial, cuda.blockIdx.x)

    return block_sums_shuffle_kernel


@functools.cache
def sum_kernel(dtype):
    """The kernel of both passes of reduce_sum, for one dtype."""

    @cuda.jit
    def reduce_sum_kernel(x, partial):
        """partial[b] = the sum of the elements block b's threads step over in a grid-stride loop."""
        sdata = cuda.shared.array(BLOCK, dtype)
        acc = dtype(0)
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # a warp reads 32 consecutive elements a step
            acc += x[i]
        sdata[cuda.threadIdx.x] = acc
        cuda.syncthreads()
        store_block_sum(sdata, partial, cuda.blockIdx.x)

    return reduce_sum_kernel


def _check(x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D array, got {x.ndim} dimensions (shape {x.shape})")
    if x.dtype not in DTYPES:
        raise ValueError(f"x must be float32, float64, int32 or int64, got {x.dtype}")
    return np.ascontiguousarray(x)


def block_sums_tree(x: np.ndarray) -> np.ndarray:
    """Stage 1: the sum of each BLOCK-element chunk of x (the last one may be shorter), a shared-memory tree."""
    x = _check(x)
    blocks = math.ceil(x.size / BLOCK)
    partial = np.zeros(blocks, x.dtype)
    if blocks:
        tree_kernel(x.dtype.type)[blocks, BLOCK](x, partial)
    return partial


def block_sums_shuffle(x: np.ndarray) -> np.ndarray:
    """Stage 2: block_sums_tree's result, the last 32 values of each block added with warp shuffles."""
    x = _check(x)
    blocks = math.ceil(x.size / BLOCK)
    partial = np.zeros(blocks, x.dtype)
    if blocks:
        shuffle_kernel(x.dtype.type)[blocks, BLOCK](x, partial)
    return partial


def reduce_sum(x: np.ndarray):
    """Stage 3: the sum of all of x, in its dtype (a numpy scalar): one pass of many blocks, one of a single block."""
    x = _check(x)
    if x.size == 0:
        return x.dtype.type(0)
    kernel = sum_kernel(x.dtype.type)
    blocks = min(MAX_BLOCKS, math.ceil(x.size / BLOCK))
    d_partial = cuda.device_array(blocks, x.dtype)
    kernel[blocks, BLOCK](cuda.to_device(x), d_partial)  # the partial sums stay on the GPU between the passes
    d_total = cuda.device_array(1, x.dtype)
    kernel[1, BLOCK](d_partial, d_total)  # one block; its grid-stride loop takes any number of partial sums
    return d_total.copy_to_host()[0]
