"""Loops over n_cols // BLOCK blocks of a row (floor, not ceiling): the ragged tail, or all of a short row, is lost."""

FAILS = ["row_sums"]


@triton.jit  # noqa: F821
def row_sum_kernel(a_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    row_ptr = a_ptr + row * row_stride
    acc = tl.zeros([BLOCK], tl.float32)  # noqa: F821
    for k in range(0, n_cols // BLOCK):
        offs = k * BLOCK + tl.arange(0, BLOCK)  # noqa: F821
        acc += tl.load(row_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32)  # noqa: F821
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))  # noqa: F821
