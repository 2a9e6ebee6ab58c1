"""Passes a.stride(1) as the row stride: every program reads the first row shifted by its index, not its own row."""

FAILS = ["row_sums"]


def row_sums(a, dtype):
    t = to_device(a, dtype)  # noqa: F821
    rows, cols = t.shape
    out = torch.zeros(rows, dtype=t.dtype, device=t.device)  # noqa: F821
    if rows and cols:
        row_sum_kernel[(rows,)](t, out, cols, t.stride(1), BLOCK=BLOCK)  # noqa: F821
    return to_numpy(out)  # noqa: F821
