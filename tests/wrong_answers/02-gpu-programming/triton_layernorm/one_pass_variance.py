"""One pass, var = E[x^2] - E[x]^2 in float32: right on moderate rows, noise around a mean of 1e4 (cancellation)."""

FAILS = ["layer_norm_large_mean"]


@triton.jit  # noqa: F821
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    total = tl.zeros([BLOCK], dtype=tl.float32)  # noqa: F821
    squares = tl.zeros([BLOCK], dtype=tl.float32)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)  # noqa: F821
        total += x
        squares += x * x
    mean = tl.sum(total, axis=0) / N  # noqa: F821
    var = tl.maximum(tl.sum(squares, axis=0) / N - mean * mean, 0.0)  # noqa: F821 (clamped: it can come out negative)
    rstd = 1.0 / tl.sqrt(var + eps)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)  # noqa: F821
