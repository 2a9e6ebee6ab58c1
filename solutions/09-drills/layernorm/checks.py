"""Checks: LayerNorm forward over the last axis, float32 in and out, float64 inside.

Visible cases are two small fixed sets of rows. Hidden cases add, on every seed: rows of one element and constant
rows (variance 0: the result is beta), rows whose variance is at or below eps (where eps outside the square root
or the unbiased variance shows), rows around 1e4 with a spread of 1e-2 (E[x^2] - E[x]^2 keeps too few digits of
the variance, even in float64), a 3-D array, no rows at all; then a property check over arrays drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.normalization import layer_norm
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-5, 1e-6)
EPS = 1e-5


def _case(x, rng, eps=EPS) -> dict:
    n = np.shape(x)[-1]
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    return {"x": f32(x), "gamma": f32(1 + 0.5 * rng.standard_normal(n)), "beta": f32(0.5 * rng.standard_normal(n)),
            "eps": eps}


def _flat_rows(rng, m, n, std) -> np.ndarray:
    """m rows of n values whose spread is exactly std (variance std^2) around a mean within +-0.1."""
    z = rng.standard_normal((m, n))
    z = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)
    return rng.uniform(-0.1, 0.1, (m, 1)) + std * z


def _shapes(draw_n):
    values = st.floats(-100, 100, width=32)
    return st.fixed_dictionaries({"x": hnp.arrays(np.float32, st.tuples(st.integers(0, 4), st.just(draw_n)),
                                                  elements=values),
                                  "gamma": hnp.arrays(np.float32, draw_n, elements=st.floats(-2, 2, width=32)),
                                  "beta": hnp.arrays(np.float32, draw_n, elements=st.floats(-2, 2, width=32)),
                                  "eps": st.sampled_from([1e-5, 1e-3, 1.0])})


CASES = st.integers(1, 8).flatmap(_shapes)


def _hint(case, got, expected) -> str:
    if isinstance(got, np.ndarray) and got.shape == expected.shape and np.isnan(got).any():
        return "NaN: a variance of 0 under a square root with eps outside it, or one divided by N - 1 = 0"
    return ""


@check(points=2)
def layer_norm_rows(student, rng, hidden):
    """layer_norm(x, gamma, beta, eps): biased variance, eps inside the square root, float64 inside, float32 out."""
    cases = [_case([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.0, 0.0, 1.0]], rng),
             _case(rng.uniform(-2, 2, (3, 6)), rng, eps=0.1)]
    if hidden:
        n = int(rng.integers(5, 12))
        cases = [_case(rng.uniform(-3, 3, (4, 1)), rng),  # one element per row: variance 0
                 _case(np.repeat(rng.uniform(-3, 3, (3, 1)), n, axis=1), rng),  # constant rows
                 _case(_flat_rows(rng, 4, n, 2e-3), rng),  # variance 4e-6, below eps
                 _case(_flat_rows(rng, 4, 2, np.sqrt(EPS)), rng),  # variance eps, two elements a row
                 _case(1e4 + 1e-2 * rng.standard_normal((8, 100)), rng),  # E[x^2] - E[x]^2 cancels
                 _case(3 * rng.standard_normal((2, 3, n)) + 1, rng),
                 _case(np.zeros((0, n)), rng),
                 _case(rng.uniform(-10, 10, (3, 1000)), rng, eps=1e-3)]
    compare_cases(student, "layer_norm", cases, layer_norm, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float32", hint=_hint)
    if hidden:
        compare_property(student, "layer_norm", CASES, layer_norm, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float32", hint=_hint)
