"""Checks: a float32 sum within 2 * eps32 * sum|x| of the exact sum, returned as a float32 value.

The truth is math.fsum of the values in float64 (aisys.interview.summation.exact_sum), the bound
summation.error_bound. Visible cases: 2**24 followed by ones (a running float32 sum keeps 2**24)
and small positive random numbers. Hidden cases add the edges (empty, one element, zeros,
cancellation, the huge term last, a huge term on either side of the ones), 10**5 positive
random numbers (a running sum is dozens of bounds off) and a property check on small arrays of
powers of two and random floats. The checks cannot tell how the learner adds: a float64
accumulator rounded to float32 at the end passes them (the notebook says so).
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview.summation import error_bound, exact_sum
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure, unredacted

HUGE = np.float32(2.0**24)  # float32's last integer of unit spacing: 2**24 + 1 rounds back to 2**24
ELEMENTS = st.one_of(st.sampled_from([2.0**24, -(2.0**24), 2.0**20, 1.0, -1.0, 0.5, 3.0, 0.0]),
                     st.floats(-1e6, 1e6, width=32))
SMALL = st.fixed_dictionaries({"x": st.lists(ELEMENTS, max_size=16).map(lambda v: np.array(v, np.float32))})


def _huge_then_ones(n, last=None):
    """2**24, n ones, and `last` if given."""
    parts = [[HUGE], np.ones(n)] + ([[last]] if last is not None else [])
    return np.concatenate(parts).astype(np.float32)


def _within_bound(got, expected, case):
    """A float32 value within error_bound of the exact sum."""
    bound, error = error_bound(case["x"]), abs(float(got) - expected)
    if not error <= bound:  # NaN too
        off = unredacted(f" ({float(got)!r}, {error:.3g} from the exact {expected!r}; the bound is {bound:.3g})")
        raise CheckFailure(f"the sum is further from the exact sum than 2 * eps32 * sum|x|{off}: a small term added "
                           "to a large float32 sum loses its low bits. Keep what each addition drops and add it back "
                           "(Kahan), or add numbers of similar size (pairwise)")
    if float(np.float32(got)) != float(got):
        raise CheckFailure(f"the sum{unredacted(f' {float(got)!r}')} is not a float32 value: add in float32 and return "
                           "np.float32 (a Python float is float64)")


@check(points=3)
def accurate_sum(student, rng, hidden):
    """accurate_sum(x) is a float32 value within 2 * eps32 * sum|x| of the exact sum, 0 for an empty x."""
    cases = [_huge_then_ones(10_000), rng.random(1000).astype(np.float32)]
    if hidden:
        n = int(rng.integers(20_000, 50_000))
        cases = [np.zeros(0, np.float32), np.array([rng.standard_normal()], np.float32), np.zeros(7, np.float32),
                 np.array([1e8, 1, -1e8], np.float32),  # cancellation: the bound is loose, the sum need not be 1
                 _huge_then_ones(n),  # a running sum loses every one
                 np.concatenate([np.ones(n), [HUGE]]).astype(np.float32),  # the ones first: exact even when naive
                 _huge_then_ones(n, last=-HUGE),  # the huge terms cancel: the ones are all that is left
                 -_huge_then_ones(n),  # negative: the same loss
                 rng.random(100_000).astype(np.float32),  # positive: a running sum is dozens of bounds off
                 (rng.standard_normal(1000) * 10.0 ** rng.integers(-20, 20, 1000)).astype(np.float32)]
    compare_cases(student, "accurate_sum", [{"x": x} for x in cases], exact_sum, returns="number", hidden=hidden,
                  compare=_within_bound)
    if hidden:
        compare_property(student, "accurate_sum", SMALL, exact_sum, rng=rng, returns="number", hidden=hidden,
                         examples=30, compare=_within_bound)
