"""Loads the last block without a mask: its lanes past the end read whatever follows the vector into the sum."""

FAILS = ["vector_sum"]


@triton.jit  # noqa: F821
def block_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: F821
    pid = tl.program_id(0)  # noqa: F821
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # noqa: F821
    x = tl.load(x_ptr + offs)  # noqa: F821
    tl.store(out_ptr + pid, tl.sum(x.to(tl.float32), axis=0))  # noqa: F821
