"""Loads every block of the online pass without a mask: the last, partial block reads past the row (the next row,
or whatever follows x) into the max and the sum."""

FAILS = ["softmax_online", "softmax_online_stable"]


@triton.jit  # noqa: F821
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    m = tl.full([], float("-inf"), tl.float32)  # noqa: F821
    d = tl.zeros([], tl.float32)  # noqa: F821
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)  # noqa: F821
        x = tl.load(x_row + offs).to(tl.float32)  # noqa: F821
        m_new = tl.maximum(m, tl.max(x, axis=0))  # noqa: F821
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # noqa: F821
        d = d * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)  # noqa: F821
        m = m_new
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)  # noqa: F821
        mask = offs < n_cols
        x = tl.load(x_row + offs).to(tl.float32)  # noqa: F821
        tl.store(out_row + offs, (tl.exp(x - m) / d).to(out_ptr.dtype.element_ty), mask=mask)  # noqa: F821
