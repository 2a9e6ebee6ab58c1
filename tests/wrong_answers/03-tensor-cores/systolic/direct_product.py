"""Sets each accumulator to the dot product of all that entered so far (A @ B directly), not from the PE's values."""

import numpy as np

FAILS = ["os_step"]

_entered = []  # (left, top) of every cycle of the current run


def os_step(a, b, acc, left, top):
    if not (a.any() or b.any() or acc.any()):  # a new run starts from an empty array
        _entered.clear()
    _entered.append((left.copy(), top.copy()))
    rows, cols = acc.shape
    # Undo the skew: A[i, k] entered row i in cycle i + k, B[k, j] column j in cycle j + k.
    depth = len(_entered)
    A = np.zeros((rows, depth), acc.dtype)
    B = np.zeros((depth, cols), acc.dtype)
    for t, (l, tp) in enumerate(_entered):
        for i in range(rows):
            if t - i >= 0:
                A[i, t - i] = l[i]
        for j in range(cols):
            if t - j >= 0:
                B[t - j, j] = tp[j]
    a = np.concatenate([left[:, None], a[:, :-1]], axis=1)
    b = np.concatenate([top[None, :], b[:-1]], axis=0)
    return a, b, A @ B
