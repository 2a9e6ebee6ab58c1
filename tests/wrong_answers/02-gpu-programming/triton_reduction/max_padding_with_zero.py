"""Pads masked lanes with 0 for the maximum too: a vector or row of negative numbers (and a ragged end) gives 0."""

FAILS = ["vector_max", "row_max"]


@triton.jit  # noqa: F821
def block_max_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: F821
    pid = tl.program_id(0)  # noqa: F821
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # noqa: F821
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # noqa: F821
    tl.store(out_ptr + pid, tl.max(x.to(tl.float32), axis=0))  # noqa: F821


@triton.jit  # noqa: F821
def row_max_kernel(a_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):  # noqa: F821
    row = tl.program_id(0)  # noqa: F821
    row_ptr = a_ptr + row * row_stride
    acc = tl.full([BLOCK], float("-inf"), tl.float32)  # noqa: F821
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)  # noqa: F821
        x = tl.load(row_ptr + offs, mask=offs < n_cols, other=0.0)  # noqa: F821
        acc = tl.maximum(acc, x.to(tl.float32))  # noqa: F821
    tl.store(out_ptr + row, tl.max(acc, axis=0).to(out_ptr.dtype.element_ty))  # noqa: F821
