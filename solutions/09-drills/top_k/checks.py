"""Checks: top-k along the last axis, largest first, ties by lower index, k > n giving all n, k = 0 nothing.

Visible cases are two small fixed ones. Hidden cases add the edges an interviewer probes: k = 0, k = n,
k > n, an empty row, a row of equal values, ties straddling the k-th place, -inf, -0.0 against 0.0, a
float32 batch of three axes, then a property check: rows of small integers (ties everywhere) drawn by
hypothesis, the first failing case shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview import decoding
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import assert_close, assert_format

# rows of small integers: ties in most rows; k from 0 to past n
CASES = st.fixed_dictionaries({
    "x": hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=6),
                    elements=st.integers(-3, 3).map(float)),
    "k": st.integers(0, 8)})


def _compare(got, expected, case):
    """(values in x's dtype, int64 indices), each compared exactly and named in a message."""
    if isinstance(got, list) and len(got) == 2:
        for part, g, e, dtype in zip(("values", "indices"), got, expected, (case["x"].dtype.name, "int64")):
            assert_format(g, dtype, where=part)
            assert_close(g, e, rtol=0, atol=0, where=part)
    assert_close(got, expected, rtol=0, atol=0, where="(values, indices)")


@check(points=2)
def top_k(student, rng, hidden):
    """top_k(x, k): (values, int64 indices) of the k largest along the last axis, largest first, ties by lower
    index; all n when k > n, empty when k = 0."""
    cases = [{"x": np.array([3.0, 1.0, 4.0, 1.0, 5.0]), "k": 3},
             {"x": np.array([[0.5, 2.0, 2.0, -1.0], [7.0, 7.0, 0.0, 7.0]]), "k": 2}]
    if hidden:
        row = rng.permutation(8).astype(np.float64)
        cases = [{"x": row, "k": 0},
                 {"x": row, "k": 8},  # k == n: the whole row, sorted
                 {"x": row[:5], "k": 9},  # k > n: all n
                 {"x": np.zeros((2, 0)), "k": 3},  # empty rows
                 {"x": np.full(6, 2.5), "k": 4},  # all equal: indices 0, 1, 2, 3
                 {"x": np.array([1.0, 5.0, 3.0, 5.0, 3.0, 3.0]), "k": 4},  # ties across the k-th place
                 {"x": np.array([-np.inf, 0.0, -np.inf, -1.0]), "k": 4},
                 {"x": np.array([0.0, -0.0, 0.0, -0.0]), "k": 3},  # -0.0 == 0.0: index order
                 {"x": rng.integers(-2, 3, (2, 3, 7)).astype(np.float32), "k": 5},  # a float32 batch
                 {"x": rng.standard_normal((4, 50)), "k": 10}]
    compare_cases(student, "top_k", cases, decoding.top_k, returns="list", hidden=hidden, compare=_compare)
    if hidden:
        compare_property(student, "top_k", CASES, decoding.top_k, rng=rng, returns="list", hidden=hidden,
                         compare=_compare)
