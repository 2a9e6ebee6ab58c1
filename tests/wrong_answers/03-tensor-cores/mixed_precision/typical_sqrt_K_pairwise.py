"""Predicts sqrt(K) u for both orders: a pairwise tree has only ceil(log2 K) + 1 roundings per product."""

import math

FAILS = ["typical_error"]


def typical_error(K, accumulate, order="sequential"):
    return math.sqrt(K) * 2.0 ** -(FRACTION_BITS[accumulate] + 1)  # noqa: F821
