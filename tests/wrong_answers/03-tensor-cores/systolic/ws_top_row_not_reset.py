"""Shifts partial sums down in place but forgets that the top row starts each from 0 (psum[1:] = psum[:-1] only)."""

import numpy as np

FAILS = ["ws_step"]


def ws_step(x, psum, w, left):
    x = np.concatenate([left[:, None], x[:, :-1]], axis=1)
    psum = psum.copy()
    psum[1:] = psum[:-1]
    return x, psum + x * w
