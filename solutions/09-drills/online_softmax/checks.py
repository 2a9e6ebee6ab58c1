"""Checks: online softmax, the running maximum and rescaled sum of a row given in chunks (Milakov & Gimelshein 2018).

The statistics are compared after every chunk, so the check sees the recurrence itself: a solution that finds the
whole row's maximum first (two passes) has the wrong m from the first chunk on, and one that never rescales its sum
is wrong from the first chunk that raises the maximum. Hidden cases add, on every seed: a maximum that grows at
every chunk, one that never grows, empty chunks (first and in the middle), one chunk, one element per chunk, values
near 1e4 (exp overflows without a maximum subtracted), a maximum that jumps by 1000 (the old sum rescales to 0),
and a long row in ragged chunks; then a property check over chunk lists drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.softmax import online_softmax_stats, softmax
from aisys_grader.checks import check, compare_cases, compare_property

STATS_TOLERANCE = (1e-9, 0.0)  # float64 statistics: the recurrence and the definition differ by rounding only
SOFTMAX_TOLERANCE = (1e-5, 1e-8)

CHUNK = hnp.arrays(np.float32, st.integers(0, 4), elements=st.floats(-30, 30, width=32))
CASES = st.fixed_dictionaries({"chunks": st.lists(CHUNK, min_size=1, max_size=5)})
NONEMPTY = CASES.filter(lambda case: sum(len(c) for c in case["chunks"]) > 0)


def _chunks(*arrays) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float32) for a in arrays]


def _ragged(x: np.ndarray, rng) -> list[np.ndarray]:
    """x cut at random places into chunks of 0 to 100 elements."""
    cuts = np.sort(rng.integers(0, len(x) + 1, len(x) // 50))
    return [c.astype(np.float32) for c in np.split(x, cuts)]


def _cases(rng, hidden) -> list[dict]:
    if not hidden:
        return [{"chunks": _chunks([1.0, 3.0], [2.0, 5.0, 4.0], [0.0])}, {"chunks": _chunks([2.0, 1.0, 0.5])}]
    ascending = np.sort(rng.uniform(-5, 5, 12))
    return [{"chunks": _chunks(*np.split(ascending, 4))},  # the maximum grows at every chunk
            {"chunks": _chunks(*np.split(ascending[::-1], 3))},  # it never grows
            {"chunks": _chunks([], [1.0, 2.0], [], [3.0], [])},  # empty chunks, leading and in between
            {"chunks": _chunks(rng.uniform(-3, 3, 7))},  # one chunk
            {"chunks": _chunks(*rng.uniform(-3, 3, (6, 1)))},  # one element per chunk
            {"chunks": _chunks(rng.uniform(9e3, 1e4, 5), rng.uniform(1e4, 1.1e4, 4))},  # exp(1e4) overflows
            {"chunks": _chunks(rng.uniform(-1, 1, 4), rng.uniform(999, 1001, 3))},  # exp(-1000) rescales to 0
            {"chunks": _ragged(rng.standard_normal(1000) * 5, rng)}]


def _stats_hint(case, got, expected) -> str:
    if not (isinstance(got, list) and len(got) == 2 and all(isinstance(g, np.ndarray) for g in got)) or \
            got[0].shape != expected[0].shape or got[1].shape != expected[1].shape:
        return "Return (m, d): two 1-D float64 arrays holding the state after each chunk"
    m, d = got
    if np.array_equal(m, expected[0]):
        return "m is right and d is not: the sum so far must be rescaled by exp(m_old - m_new) when the maximum grows"
    return "m[i] is the largest element of chunks[0..i], the maximum so far, not that of the whole row"


@check(points=2)
def running_stats(student, rng, hidden):
    """online_softmax_stats(chunks): the running maximum and rescaled sum after every chunk, in float64."""
    compare_cases(student, "online_softmax_stats", _cases(rng, hidden), online_softmax_stats, returns="list",
                  hidden=hidden, tolerance=STATS_TOLERANCE, hint=_stats_hint)
    if hidden:
        compare_property(student, "online_softmax_stats", CASES, online_softmax_stats, rng=rng, returns="list",
                         hidden=hidden, tolerance=STATS_TOLERANCE, hint=_stats_hint)


def _softmax_of(chunks) -> np.ndarray:
    return softmax(np.concatenate(chunks).astype(np.float32))


@check(points=1)
def softmax_of_chunks(student, rng, hidden):
    """online_softmax(chunks): the softmax of the whole row as one float32 array."""
    compare_cases(student, "online_softmax", _cases(rng, hidden), _softmax_of, returns="array", hidden=hidden,
                  tolerance=SOFTMAX_TOLERANCE, dtype="float32")
    if hidden:
        compare_property(student, "online_softmax", NONEMPTY, _softmax_of, rng=rng, returns="array",
                         hidden=hidden, tolerance=SOFTMAX_TOLERANCE, dtype="float32")
