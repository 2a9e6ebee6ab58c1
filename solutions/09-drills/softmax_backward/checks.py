"""Checks: softmax backward over the last axis, dx from x and a random upstream gradient dy, in float64.

Visible cases are two small fixed arrays. Hidden cases add, on every seed: one element per row (dx = 0), a constant
upstream (dx = 0), logits around 1e3 and spread over 1e4 (exp overflows without the maximum subtracted), a 3-D array,
rows of 500; then a property check over arrays drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.autograd.backward import softmax_backward
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-7, 1e-9)  # float64 both sides, summed in other orders: rounding only


def _case(x, rng, dy=None) -> dict:
    x = np.asarray(x, dtype=np.float64)
    return {"x": x, "dy": rng.standard_normal(x.shape) if dy is None else dy}


def _arrays(shape):
    values = st.floats(-50, 50)
    return st.fixed_dictionaries({"x": hnp.arrays(np.float64, shape, elements=values),
                                  "dy": hnp.arrays(np.float64, shape, elements=st.floats(-10, 10))})


CASES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6).flatmap(_arrays)


def _hint(case, got, expected) -> str:
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return "Return dx, an array of x's shape"
    if np.isnan(got).any():
        return "NaN comes from inf / inf: exp overflowed; subtract each row's maximum before exp"
    s = np.exp(case["x"] - case["x"].max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    if np.allclose(got, case["dy"] * s * (1 - s)):
        return "that is only the diagonal of softmax's Jacobian: every s_i also depends on every other x_j"
    return ""


@check(points=3)
def gradients(student, rng, hidden):
    """softmax_backward(x, dy) = s * (dy - sum(dy * s)) over the last axis, stable for large logits."""
    cases = [_case([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0]], rng), _case(rng.standard_normal((3, 5)), rng)]
    if hidden:
        n = int(rng.integers(3, 8))
        cases = [_case(rng.standard_normal((4, 1)), rng),  # one element per row: dx = 0
                 _case(rng.standard_normal((3, n)), rng, dy=np.full((3, n), 2.5)),  # constant upstream: dx = 0
                 _case(1000 + rng.standard_normal((3, n)), rng),  # exp(1000) overflows float64
                 _case(1e4 * rng.standard_normal((2, n)), rng),
                 _case(rng.standard_normal((2, 3, n)), rng),
                 _case(3 * rng.standard_normal((2, 500)), rng)]
    compare_cases(student, "softmax_backward", cases, softmax_backward, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float64", hint=_hint)
    if hidden:
        compare_property(student, "softmax_backward", CASES, softmax_backward, rng=rng, returns="array",
                         hidden=hidden, tolerance=TOLERANCE, dtype="float64", hint=_hint)
