"""Forgets to mask the distances of the padded columns: each adds (0 - mean)^2 to the variance of a ragged row."""

FAILS = ['layer_norm', 'layer_norm_flat_rows', 'layer_norm_large_mean']


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
        d = x - mean
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)  # noqa: F821
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # noqa: F821
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)  # noqa: F821
