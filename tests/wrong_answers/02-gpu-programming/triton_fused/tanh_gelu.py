"""Computes GPT-2's tanh approximation of GELU where the exact (erf) one is asked for: off by up to 5e-4."""

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
    t = x + b
    inner = 0.7978845608028654 * (t + 0.044715 * t * t * t)  # sqrt(2 / pi) * (t + 0.044715 t^3)
    tanh = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)  # noqa: F821 (Triton has no tanh; this form saturates to +-1)
    y = 0.5 * t * (1.0 + tanh) + r
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)  # noqa: F821
