"""Gives every chunk n // p elements, so the last n % p elements are in no chunk and are never reduced."""

FAILS = ["chunk_bounds", "ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"]


def chunk_bounds(n, p):
    size = n // p
    return [(c * size, (c + 1) * size) for c in range(p)]
