"""Summing float32 numbers accurately in float32: Kahan's compensated sum, the exact sum, and the bound between them.

A running float32 sum rounds at every addition, and once the sum is large each small term loses its low bits:
2**24 + 1 is 2**24 in float32, so 2**24 followed by a million ones sums to 2**24. Kahan's compensated summation
(Kahan, "Further remarks on reducing truncation errors", CACM 8(1), 1965) keeps the part of each term that the
addition dropped, c = (t - s) - y, and subtracts it from the next term. Its error is at most about
2u * sum |x_i| (u = 2**-24, float32's unit roundoff) whatever n is, against (n - 1) u * sum |x_i| for the running
sum (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 2002, sections 4.2 and 4.3).
"""

import math

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23: twice float32's unit roundoff
BOUND_EPS = 2  # an accurate sum is within BOUND_EPS * EPS32 * sum |x_i| of the exact sum


def _float32_vector(x) -> np.ndarray:
    array = np.asarray(x)
    if array.ndim != 1 or array.dtype != np.float32:
        raise ValueError(f"x must be a 1-D float32 array, got shape {array.shape} and dtype {array.dtype}")
    if not np.isfinite(array).all():
        raise ValueError("x must hold finite numbers")
    return array


def kahan_sum(x) -> np.float32:
    """The sum of the float32 vector x, added in float32 with Kahan's compensation (0 for an empty x)."""
    total, compensation = np.float32(0), np.float32(0)
    for value in _float32_vector(x):
        y = value - compensation  # the term, less what the last addition dropped
        t = total + y  # the low bits of y are lost here...
        compensation = (t - total) - y  # ...and recovered here (exactly, in float32), negated
        total = t
    return total


def exact_sum(x) -> float:
    """The sum of x as real numbers, correctly rounded to float64 (math.fsum; float32 values are exact in float64)."""
    return math.fsum(_float32_vector(x).astype(np.float64).tolist())


def error_bound(x) -> float:
    """How far an accurate float32 sum of x may be from the exact sum: BOUND_EPS * EPS32 * sum |x_i|."""
    return BOUND_EPS * EPS32 * math.fsum(np.abs(_float32_vector(x).astype(np.float64)).tolist())
