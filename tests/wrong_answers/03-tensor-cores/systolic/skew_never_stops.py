"""Forgets the end of a stream: keeps sending the last element after it, instead of -1."""

import numpy as np

FAILS = ["skew"]


def skew(t, n, length):
    k = t - np.arange(n)
    return np.where(k >= 0, np.minimum(k, length - 1), -1)
