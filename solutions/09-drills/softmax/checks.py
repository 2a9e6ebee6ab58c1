"""Checks: a numerically stable softmax along the last axis, float32 in and out.

Visible cases are two small fixed arrays. Hidden cases add the edges an interviewer probes, on every seed: rows of
float32's largest values (exp overflows without the maximum subtracted), rows far below -100 (exp underflows to 0,
and 0 / 0 is NaN), rows with -inf entries, rows of very different scales in one array (a single maximum for the
whole array underflows the others), one element per row, no rows at all, a 3-D array; then a property check over
arrays drawn by hypothesis, shrunk to the smallest failing one.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.softmax import softmax
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-5, 1e-8)  # as the notebook states: float32 arithmetic is within it, float64 rounded once is exact
BIG = float(np.finfo(np.float32).max)

# moderate values, with huge ones of either sign mixed in: shapes of one to three axes
ELEMENTS = st.one_of(st.floats(-100, 100, width=32), st.floats(-BIG, BIG, width=32))
ARRAYS = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=ELEMENTS)
CASES = st.fixed_dictionaries({"x": ARRAYS})


def _hint(case, got, expected) -> str:
    if isinstance(got, np.ndarray) and got.shape == expected.shape and np.isnan(got).any():
        return "NaN comes from inf / inf or 0 / 0: exp overflowed or every term underflowed"
    return ""


@check(points=2)
def softmax_rows(student, rng, hidden):
    """softmax(x): float32, along the last axis, exact for extreme rows: largest values, far below -100, -inf."""
    cases = [{"x": np.array([1.0, 2.0, 3.0], dtype=np.float32)},
             {"x": np.array([[0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 0.5, 4.0], [10.0, 20.0, 30.0, 40.0]], np.float32)}]
    if hidden:
        f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
        width = int(rng.integers(3, 9))
        cases = [{"x": f32([[BIG, BIG, BIG / 2], [BIG, -BIG, 0.0], [-BIG, -BIG, -BIG]])},  # exp overflows
                 {"x": f32(rng.uniform(-1e4, -200, (3, width)))},  # exp underflows to 0
                 {"x": f32([[-np.inf, 0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf, -1e3],
                            [5.0, -np.inf, 5.0, 2.0]])},
                 {"x": f32(np.concatenate([rng.uniform(1e3, 2e3, (2, width)), rng.uniform(-2e3, -1e3, (2, width))]))},
                 {"x": f32(rng.uniform(-5, 5, (4, 1)))},  # one element per row: all 1
                 {"x": np.zeros((0, width), np.float32)},  # no rows
                 {"x": f32(rng.standard_normal((2, 3, width)) * 10)},
                 {"x": f32(rng.standard_normal((3, 1000)) * 20)}]
    compare_cases(student, "softmax", cases, softmax, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float32", hint=_hint)
    if hidden:
        compare_property(student, "softmax", CASES, softmax, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float32", hint=_hint)
