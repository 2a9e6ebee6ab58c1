"""Multiplies the values a PE held before this cycle's move, not those that just arrived (acc += a * b, then shift)."""

import numpy as np

FAILS = ["os_step"]


def os_step(a, b, acc, left, top):
    acc = acc + a * b
    a = np.concatenate([left[:, None], a[:, :-1]], axis=1)
    b = np.concatenate([top[None, :], b[:-1]], axis=0)
    return a, b, acc
