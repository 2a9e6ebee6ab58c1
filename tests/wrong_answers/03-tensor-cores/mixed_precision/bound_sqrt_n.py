"""Gives the typical size of random rounding errors, sqrt(n) u, as the worst-case bound."""

import math

FAILS = ["error_bound"]


def error_bound(K, accumulate, order="sequential"):
    return math.sqrt(roundings(K, order)) * 2.0 ** -(FRACTION_BITS[accumulate] + 1)  # noqa: F821
