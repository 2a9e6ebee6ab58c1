"""Fits t = α + nβ by ordinary least squares: the largest messages decide the line, and α comes out wrong."""

import numpy as np

FAILS = ["fit_alpha_beta", "measured_fit"]


def fit_alpha_beta(sizes, seconds):
    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    if seconds.ndim == 2:
        seconds = np.median(seconds, axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(np.stack([np.ones_like(sizes), sizes], axis=1), seconds, rcond=None)
    return float(alpha), float(beta)
