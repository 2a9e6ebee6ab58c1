"""Adds the bias after the GELU, gelu(x) + bias + residual: the operations of the chain in the wrong order."""

FAILS = ["bias_gelu_residual"]


@triton.jit  # noqa: F821
def bias_gelu_residual_kernel(x_ptr, bias_ptr, res_ptr, y_ptr, N, BLOCK_N: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # noqa: F821
    mask = cols < N
    offsets = row * N + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
    r = tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)) + b + r  # noqa: F821
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)  # noqa: F821
