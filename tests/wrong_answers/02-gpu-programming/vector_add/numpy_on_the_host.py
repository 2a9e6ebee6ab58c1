"""Adds with numpy on the host: the right numbers, but no kernel runs."""

FAILS = ["vector_add_grid_stride", "vector_add_coalesced"]


def vector_add(x, y):
    return x + y
