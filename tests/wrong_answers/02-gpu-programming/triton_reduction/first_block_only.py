"""Launches one program and returns its block sum: right up to BLOCK elements, the rest of the vector forgotten."""

FAILS = ["vector_sum"]


def vector_sum(x, dtype):
    t = to_device(x, dtype)  # noqa: F821
    if t.numel() == 0:
        return 0.0
    partial = torch.empty(1, dtype=torch.float32, device=t.device)  # noqa: F821
    block_sum_kernel[(1,)](t, partial, t.numel(), BLOCK=BLOCK)  # noqa: F821
    return partial.to(TORCH_DTYPES[dtype]).item()  # noqa: F821
