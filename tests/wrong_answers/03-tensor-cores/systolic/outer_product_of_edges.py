"""Adds the product of the values entering at the edges (acc += outer(left, top)), as if each PE saw the edges."""

import numpy as np

FAILS = ["os_step"]


def os_step(a, b, acc, left, top):
    a = np.concatenate([left[:, None], a[:, :-1]], axis=1)
    b = np.concatenate([top[None, :], b[:-1]], axis=0)
    return a, b, acc + np.outer(left, top)
