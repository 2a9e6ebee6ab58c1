"""Passes x.stride(1) as the row stride, the wrong axis: program r reads the first row shifted by r elements."""

FAILS = ["softmax_rows", "softmax_rows_stable"]


def softmax_rows(x, dtype):
    t = to_device(x, dtype)  # noqa: F821
    rows, cols = t.shape
    out = torch.empty_like(t)  # noqa: F821
    if rows and cols:
        block = triton.next_power_of_2(cols)  # noqa: F821
        softmax_row_kernel[(rows,)](t, out, cols, t.stride(1), out.stride(0), BLOCK=block)  # noqa: F821
    return to_numpy(out)  # noqa: F821
