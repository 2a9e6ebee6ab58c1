"""Pads the block with other=0.0: each padding lane adds exp(-m) to the sum, and 0 is the max of a row of negative
numbers (or of -inf)."""

FAILS = ["softmax_rows", "softmax_rows_stable"]


@triton.jit  # noqa: F821
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    offs = tl.arange(0, BLOCK)  # noqa: F821
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)  # noqa: F821
    m = tl.max(x, axis=0)  # noqa: F821
    e = tl.exp(x - m)  # noqa: F821
    d = tl.sum(e, axis=0)  # noqa: F821
    tl.store(out_ptr + row * out_row_stride + offs, (e / d).to(out_ptr.dtype.element_ty), mask=mask)  # noqa: F821
