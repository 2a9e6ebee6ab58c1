"""Uses log2(p) where the table says ⌈lg p⌉: a fractional number of tree rounds when p is not a power of two."""

import math

FAILS = ["predicted_time", "crossover"]


def ceil_log2(p):
    return math.log2(p)
