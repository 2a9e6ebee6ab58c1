"""One element per thread, no loop over the row: rows longer than BLOCK = 256 columns lose their tail."""

FAILS = ["cuda_softmax", "cuda_softmax_stable"]

_device_functions = SOFTMAX_SOURCE[:SOFTMAX_SOURCE.index('extern "C"')]  # noqa: F821 (block_max, block_sum)
SOFTMAX_SOURCE = _device_functions + r"""
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float scratch[BLOCK / WARP];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    const int j = threadIdx.x;
    const float m = block_max(j < cols ? row[j] : NEG_INF, scratch);
    const float e = j < cols ? expf(row[j] - m) : 0.0f;
    const float s = block_sum(e, scratch);
    if (j < cols) out[j] = e / s;
}
"""
