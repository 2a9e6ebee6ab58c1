"""Row-wise softmax in CUDA C, numerically stable: one block per row, block-level max and sum from warp shuffles.

A block of BLOCK threads takes one row: its threads step over the row, then combine
their values with a block reduction (each warp by `__shfl_xor_sync`, whose butterfly
leaves the result in every lane; then the warps' results, one float each in shared
memory, the same way in every warp).
Subtracting the row's maximum first makes every exponent <= 0, so nothing overflows
(softmax is unchanged: the factor exp(-max) cancels).
"""

import numpy as np

from aisys import cuda_c

BLOCK = 256  # threads per block, one block per row
WARP = 32

SOURCE = r"""
#define BLOCK 256
#define WARP 32
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)  // -infinity

// The maximum of v over the block, returned to every thread; scratch holds one float per warp.
__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));  // a butterfly: every lane ends with the maximum
    if (lane == 0) scratch[warp] = v;
    __syncthreads();  // every warp's maximum is in scratch
    v = lane < BLOCK / WARP ? scratch[lane] : NEG_INF;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)  // each warp combines all of them
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    __syncthreads();  // every warp has read scratch before it is written again
    return v;
}

// The sum of v over the block, returned to every thread.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < BLOCK / WARP ? scratch[lane] : 0.0f;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    __syncthreads();
    return v;
}

// y[r, :] = softmax(x[r, :]) for the row r = blockIdx.x of a row-major matrix with `cols` columns.
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[BLOCK / WARP];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = NEG_INF;
    for (int j = threadIdx.x; j < cols; j += BLOCK) m = fmaxf(m, row[j]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += BLOCK) s += expf(row[j] - m);  // every exponent <= 0
    s = block_sum(s, scratch);  // >= 1: the maximum's term is exp(0)
    for (int j = threadIdx.x; j < cols; j += BLOCK) out[j] = expf(row[j] - m) / s;
}
"""


def softmax(x):
    """softmax over the last dimension of a 2-D float32 torch tensor, on x's device (computed on the GPU).

    A row of -inf only gives NaN, as torch.softmax does.
    """
    import torch

    cuda_c.float32_tensor("x", x, ndim=2)
    rows, cols = x.shape
    if cols >= 2**31:
        raise ValueError(f"x must have fewer than 2**31 columns, got {cols}")
    cupy = cuda_c.require()
    if x.numel() == 0:
        return torch.empty_like(x)
    d_x = cuda_c.to_cupy(x)
    y = cupy.empty_like(d_x)
    cuda_c.raw_kernel(SOURCE, "softmax_rows")((rows,), (BLOCK,), (d_x, y, np.int32(cols)))
    return cuda_c.to_torch(y, x)
