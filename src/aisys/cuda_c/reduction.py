"""Sum of a float32 vector in CUDA C: a grid-stride loop, a shared-memory tree, warp shuffles, two passes.

Pass 1 runs many blocks: each thread adds its elements in a register (a warp reads 32
consecutive floats a step), the block adds its threads' sums as a tree in shared memory
down to 32 values, and one warp adds those with `__shfl_down_sync`, in registers. Pass 2
runs the same kernel as one block over the partial sums.
"""

import numpy as np

from aisys import cuda_c

BLOCK = 256  # threads per block
WARP = 32
MAX_BLOCKS = 1024  # blocks of pass 1: about 8 per multiprocessor of an H100 (132), enough to hide memory latency

SOURCE = r"""
#define BLOCK 256
#define WARP 32
#define FULL_MASK 0xffffffffu

// partial[blockIdx.x] = the sum of the x[i] this block's threads step over in a grid-stride loop.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    __shared__ float sdata[BLOCK];
    const int tid = threadIdx.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + tid; i < n; i += (long long)gridDim.x * BLOCK)
        acc += x[i];  // a warp reads 32 consecutive floats a step: coalesced
    sdata[tid] = acc;
    for (int s = BLOCK / 2; s >= WARP; s >>= 1) {
        __syncthreads();  // what the other warps stored (the sums above, or the level before) is in sdata
        if (tid < s) sdata[tid] += sdata[tid + s];  // sequential addressing: whole warps busy or idle
    }
    if (tid < WARP) {  // the last 32 values: one warp, in registers, with no barrier
        float v = sdata[tid];  // written by this very thread at the last level
        for (int offset = WARP / 2; offset > 0; offset >>= 1)
            v += __shfl_down_sync(FULL_MASK, v, offset);  // lane i adds lane i + offset's value
        if (tid == 0) partial[blockIdx.x] = v;
    }
}
"""


def blocks_for(n: int) -> int:
    """Blocks of pass 1 for n elements: one per BLOCK elements, at most MAX_BLOCKS (then a grid-stride loop)."""
    return min(MAX_BLOCKS, -(-n // BLOCK))


def vector_sum(x):
    """The sum of a 1-D float32 torch tensor, as a 0-d float32 tensor on x's device (computed on the GPU)."""
    import torch

    cuda_c.float32_tensor("x", x, ndim=1)
    cupy = cuda_c.require()
    n = x.numel()
    if n == 0:
        return torch.zeros((), dtype=torch.float32, device=x.device)
    kernel = cuda_c.raw_kernel(SOURCE, "block_sum")
    blocks = blocks_for(n)
    partial, total = cupy.empty(blocks, cupy.float32), cupy.empty(1, cupy.float32)
    kernel((blocks,), (BLOCK,), (cuda_c.to_cupy(x), partial, np.int64(n)))
    kernel((1,), (BLOCK,), (partial, total, np.int64(blocks)))  # pass 2: one block over the partial sums
    return cuda_c.to_torch(total, x).reshape(())
