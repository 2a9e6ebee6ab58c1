"""Skews the wrong way: the last stream starts first and stream 0 waits n - 1 cycles."""

import numpy as np

FAILS = ["skew"]


def skew(t, n, length):
    k = t - (n - 1 - np.arange(n))
    return np.where((k >= 0) & (k < length), k, -1)
