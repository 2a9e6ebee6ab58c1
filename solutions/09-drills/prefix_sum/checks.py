"""Checks: inclusive and exclusive prefix sums, plain and segmented, as exact int64 arrays.

Visible cases are small fixed vectors. Hidden cases add the edges an interviewer probes (empty, one
element, int32 values near 2**31 whose sums overflow int32, negative numbers; for segments: every
element flagged, none, flags[0] unset, a flag on the last element) in both modes, and a property
check: vectors of up to 16 int32 or int64 numbers with random flags, the first failing case shrunk
to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview.prefix_sums import prefix_sum as reference_scan
from aisys.interview.prefix_sums import segmented_prefix_sum as reference_segmented
from aisys_grader.checks import check, compare_cases, compare_property

INT32_MAX = 2**31 - 1


def _vectors(n: int, segmented: bool):
    """A strategy of (x, [flags,] exclusive) cases of n elements, int32 or int64."""
    def case(dtype):
        bound = 2**31 - 1 if dtype == np.int32 else 2**40
        numbers = st.lists(st.integers(-bound, bound), min_size=n, max_size=n).map(lambda v: np.array(v, dtype))
        fields = {"x": numbers}
        if segmented:
            fields["flags"] = st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, bool))
        return st.fixed_dictionaries({**fields, "exclusive": st.booleans()})
    return st.sampled_from([np.int32, np.int64]).flatmap(case)


def _small(segmented: bool):
    return st.integers(0, 16).flatmap(lambda n: _vectors(n, segmented))


def _hint(case, got, expected):
    """What a wrong scan usually means."""
    if got.shape != expected.shape or got.dtype != np.int64:
        return "Return a new int64 array of x's length."
    if case["x"].size > 1 and (np.array_equal(got[1:], expected[:-1]) or np.array_equal(got[:-1], expected[1:])):
        return ("The result is shifted by one element: the inclusive scan includes x[i] in out[i], the exclusive "
                "one does not (and starts with 0).")
    if case["x"].dtype == np.int32 and not ((got - expected) % 2**32).any():
        return "The sums wrapped around 2**32: add in int64 (np.cumsum(x, dtype=x.dtype) adds int32 in int32)."
    if "flags" in case:
        return ("Look at each segment's first element: the inclusive scan gives x[start] there and the exclusive "
                "one 0; element 0 starts a segment even when flags[0] is unset.")
    return ""


def _both(cases):
    """Each case (x[, flags]) in both modes."""
    return [dict(case, exclusive=exclusive) for case in cases for exclusive in (False, True)]


def _int32_near_max(rng, n):
    return rng.integers(INT32_MAX - 1000, INT32_MAX, n, endpoint=True).astype(np.int32)


@check(points=1)
def prefix_sum(student, rng, hidden):
    """prefix_sum(x, exclusive): the inclusive or exclusive scan as int64, exact, for int32 and int64 input."""
    cases = [{"x": np.array([3, 1, 4, 1, 5], np.int32)}, {"x": np.array([-2, 7, 0, 10**12], np.int64)},
             {"x": np.array([INT32_MAX, INT32_MAX, 1], np.int32)}]
    if hidden:
        cases = [{"x": np.zeros(0, np.int32)}, {"x": np.array([int(rng.integers(-100, 100))], np.int64)},
                 {"x": _int32_near_max(rng, int(rng.integers(3, 50)))},  # sums past 2**31
                 {"x": rng.integers(-2**31, 2**31, 200).astype(np.int32)},
                 {"x": rng.integers(-2**50, 2**50, 100)}]
    compare_cases(student, "prefix_sum", _both(cases), reference_scan, returns="array", hidden=hidden,
                  dtype="int64", hint=_hint)
    if hidden:
        compare_property(student, "prefix_sum", _small(segmented=False), reference_scan, rng=rng, returns="array",
                         hidden=hidden, examples=25, dtype="int64", hint=_hint)


@check(points=2)
def segmented_prefix_sum(student, rng, hidden):
    """segmented_prefix_sum(x, flags, exclusive): the scan restarted at every flagged element and at element 0."""
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    cases = [{"x": x, "flags": np.array([0, 0, 1, 0, 0, 1, 1, 0], bool)},
             {"x": x.astype(np.int64), "flags": np.array([1, 0, 0, 1, 0, 0, 0, 0], bool)}]
    if hidden:
        n = int(rng.integers(5, 40))
        y = rng.integers(-1000, 1000, n)
        flags = rng.random(n) < 0.3
        cases = [{"x": np.zeros(0, np.int64), "flags": np.zeros(0, bool)},
                 {"x": np.array([7], np.int32), "flags": np.array([False])},
                 {"x": y, "flags": np.ones(n, bool)},  # every element its own segment
                 {"x": y, "flags": np.zeros(n, bool)},  # one segment: the plain scan
                 {"x": y, "flags": np.r_[False, flags[1:]]},  # flags[0] unset: element 0 starts a segment anyway
                 {"x": y, "flags": np.r_[True, flags[1:-1], True]},  # the last element a segment of its own
                 {"x": _int32_near_max(rng, n), "flags": np.r_[flags[:-1], False] | (np.arange(n) == n // 2)}]
    compare_cases(student, "segmented_prefix_sum", _both(cases), reference_segmented, returns="array",
                  hidden=hidden, dtype="int64", hint=_hint)
    if hidden:
        compare_property(student, "segmented_prefix_sum", _small(segmented=True), reference_segmented, rng=rng,
                         returns="array", hidden=hidden, examples=25, dtype="int64", hint=_hint)
