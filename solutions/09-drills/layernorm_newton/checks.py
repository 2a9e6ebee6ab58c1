"""Checks: a square root by Newton's method from a stated start, and LayerNorm built on it, in float64.

Both are compared with exactly `iterations` steps from y0 = (1 + x) / 2: after few steps the value is still well
above the true square root, so np.sqrt, another start or another step count fails. Hidden cases add, on every seed:
zero steps, one step, x = 1 (a fixed point), very small and very large x, a 2-D x; for LayerNorm rows of variance
100 and 1e-4 after 0 to 4 steps, constant rows and rows of one element (the square root of eps alone), no rows,
a 3-D x, and 40 steps (converged); then property checks over values drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.normalization import layer_norm_newton, sqrt_newton
from aisys_grader.checks import check, compare_cases, compare_property

SQRT_TOLERANCE = (1e-12, 0.0)
LAYER_NORM_TOLERANCE = (1e-10, 1e-12)

SQRT_CASES = st.fixed_dictionaries({
    "x": hnp.arrays(np.float64, st.integers(1, 6), elements=st.floats(1e-6, 1e6)),
    "iterations": st.integers(0, 8)})


def _rows(n):
    values = st.floats(-100, 100)
    return st.fixed_dictionaries({"x": hnp.arrays(np.float64, st.tuples(st.integers(0, 4), st.just(n)),
                                                  elements=values),
                                  "gamma": hnp.arrays(np.float64, n, elements=st.floats(-2, 2)),
                                  "beta": hnp.arrays(np.float64, n, elements=st.floats(-2, 2)),
                                  "eps": st.sampled_from([1e-5, 1e-2, 1.0]),
                                  "iterations": st.integers(0, 8)})


LAYER_NORM_CASES = st.integers(1, 6).flatmap(_rows)


def _sqrt_hint(case, got, expected) -> str:
    if isinstance(got, np.ndarray) and got.shape == expected.shape and \
            np.allclose(got, np.sqrt(case["x"]), rtol=1e-12) and case["iterations"] < 20:
        return ("these are the true square roots, but after this few steps from y0 = (1 + x) / 2 Newton's method "
                "is not there yet: take exactly `iterations` steps, no np.sqrt")
    return ""


@check(points=1)
def newton_sqrt(student, rng, hidden):
    """sqrt_newton(x, iterations): exactly `iterations` Newton steps from y0 = (1 + x) / 2, no library square root."""
    cases = [{"x": np.array([4.0, 100.0, 0.01, 1.0]), "iterations": 3},
             {"x": np.array([2.0, 9.0]), "iterations": 0}]
    if hidden:
        cases = [{"x": rng.uniform(0.1, 50, 5), "iterations": 0},
                 {"x": rng.uniform(0.1, 50, 5), "iterations": 1},
                 {"x": np.ones(3), "iterations": int(rng.integers(1, 6))},  # a fixed point
                 {"x": 10.0 ** rng.uniform(-12, -6, 4), "iterations": 5},  # far below the start: slow
                 {"x": 10.0 ** rng.uniform(8, 14, 4), "iterations": 6},  # far above it
                 {"x": rng.uniform(0.5, 2, (3, 4)), "iterations": 2},
                 {"x": 10.0 ** rng.uniform(-3, 3, 8), "iterations": 60}]  # converged
    compare_cases(student, "sqrt_newton", cases, sqrt_newton, returns="array", hidden=hidden,
                  tolerance=SQRT_TOLERANCE, dtype="float64", hint=_sqrt_hint)
    if hidden:
        compare_property(student, "sqrt_newton", SQRT_CASES, sqrt_newton, rng=rng, returns="array", hidden=hidden,
                         tolerance=SQRT_TOLERANCE, dtype="float64", hint=_sqrt_hint)


def _case(x, rng, iterations, eps=1e-5) -> dict:
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    return {"x": x, "gamma": 1 + 0.5 * rng.standard_normal(n), "beta": 0.5 * rng.standard_normal(n), "eps": eps,
            "iterations": iterations}


@check(points=2)
def layer_norm_rows(student, rng, hidden):
    """layer_norm_newton(x, gamma, beta, eps, iterations): biased variance, eps inside, 1 / sqrt_newton(var + eps)."""
    cases = [_case([[1.0, 2.0, 3.0, 10.0], [-1.0, 0.0, 0.0, 1.0]], rng, 3),
             _case(rng.uniform(-2, 2, (2, 5)), rng, 8, eps=0.1)]
    if hidden:
        n = int(rng.integers(4, 10))
        cases = [_case(10 * rng.standard_normal((3, n)), rng, 0),  # variance about 100
                 _case(10 * rng.standard_normal((3, n)), rng, 3),
                 _case(1e-2 * rng.standard_normal((3, n)), rng, 4),  # variance about 1e-4
                 _case(np.repeat(rng.uniform(-3, 3, (2, 1)), n, axis=1), rng, 2),  # constant rows: sqrt of eps
                 _case(rng.uniform(-3, 3, (3, 1)), rng, 2, eps=0.5),  # one element per row
                 _case(np.zeros((0, n)), rng, 3),
                 _case(rng.standard_normal((2, 2, n)), rng, 1),
                 _case(5 * rng.standard_normal((4, 64)), rng, 40)]  # converged
    compare_cases(student, "layer_norm_newton", cases, layer_norm_newton, returns="array", hidden=hidden,
                  tolerance=LAYER_NORM_TOLERANCE, dtype="float64")
    if hidden:
        compare_property(student, "layer_norm_newton", LAYER_NORM_CASES, layer_norm_newton, rng=rng,
                         returns="array", hidden=hidden, tolerance=LAYER_NORM_TOLERANCE, dtype="float64")
