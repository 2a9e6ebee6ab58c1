"""Reduce-scatter gives rank r the reduced block r + 1, where a ring reduce-scatter leaves it, not block r."""

FAILS = ["all_gather_reduce_scatter", "identities"]


def reduce_scatter(buffers, op="sum"):
    p = len(buffers)
    blocks = np.split(combine(buffers, op), p)  # noqa: F821
    return [blocks[(rank + 1) % p].copy() for rank in range(p)]
