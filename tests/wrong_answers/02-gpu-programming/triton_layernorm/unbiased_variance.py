"""Divides the sum of squared distances by N - 1 (the unbiased estimator, torch.var's default): LayerNorm uses N."""

FAILS = ["layer_norm", "layer_norm_flat_rows"]


@triton.jit  # noqa: F821
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)  # noqa: F821
    mean = tl.sum(acc, axis=0) / N  # noqa: F821
    acc = tl.zeros([BLOCK], dtype=tl.float32)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        d = tl.where(mask, x - mean, 0.0)  # noqa: F821
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / (N - 1) + eps)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)  # noqa: F821
