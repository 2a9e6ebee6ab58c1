"""Predicts the typical error of random data as n u, the worst case, where every rounding errs the same way."""

FAILS = ["typical_error"]


def typical_error(K, accumulate, order="sequential"):
    return roundings(K, order) * 2.0 ** -(FRACTION_BITS[accumulate] + 1)  # noqa: F821
