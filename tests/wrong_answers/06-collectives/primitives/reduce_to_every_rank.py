"""Reduce leaves the result on every rank (an all-reduce): the non-root ranks should keep their own buffers."""

FAILS = ["rooted"]


def reduce(buffers, root, op="sum"):
    return [combine(buffers, op) for _ in buffers]  # noqa: F821
