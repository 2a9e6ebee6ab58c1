"""Checks: one decode step over a KV cache: append the new token's k and v, then attend over all t + 1 positions.

Visible cases are two small fixed ones. Hidden cases add the edges an interviewer probes: an empty cache
(t = 0: the output is the token's own v), one cached token, one head, head size 1, a cache as long as the
number of heads (where appending along the wrong axis still fits), scores in the hundreds (the softmax must
not overflow) and a long cache, then a property check: shapes and data drawn by hypothesis, the first
failing case shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview import attention
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import assert_close, assert_format

TOLERANCE = (1e-9, 1e-9)
PARTS = ("out", "k_cache", "v_cache")


def _case(rng, heads, t, d, magnitude=1.0) -> dict:
    draw = lambda *shape: rng.standard_normal(shape) * magnitude  # noqa: E731
    return {"k_cache": draw(heads, t, d), "v_cache": draw(heads, t, d), "q": draw(heads, d), "k": draw(heads, d),
            "v": draw(heads, d)}


@st.composite
def CASES(draw):
    """Shapes drawn (and shrunk) by hypothesis; the data from a drawn seed."""
    heads, t, d = draw(st.integers(1, 4)), draw(st.integers(0, 8)), draw(st.integers(1, 8))
    return _case(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), heads, t, d)


def _compare(got, expected, case):
    """(out, k_cache, v_cache), each float64 and close to the reference's, each named in a message."""
    if isinstance(got, list) and len(got) == len(PARTS):
        for part, g, e in zip(PARTS, got, expected):
            assert_format(g, "float64", where=part)
            assert_close(g, e, rtol=TOLERANCE[0], atol=TOLERANCE[1], where=part)
    assert_close(got, expected, rtol=TOLERANCE[0], atol=TOLERANCE[1], where="(out, k_cache, v_cache)")


@check(points=2)
def decode_step(student, rng, hidden):
    """decode_step(k_cache, v_cache, q, k, v): (out (heads, d), k_cache and v_cache (heads, t + 1, d)), float64,
    the new token appended last and attended to."""
    fixed = np.random.default_rng(0)
    cases = [_case(fixed, 2, 3, 4), _case(fixed, 3, 5, 2)]
    if hidden:
        cases = [_case(rng, 3, 0, 4),  # an empty cache: the output is the new token's v
                 _case(rng, 2, 1, 4),  # one cached token
                 _case(rng, 1, 6, 8),  # one head
                 _case(rng, 4, 3, 1),  # head size 1
                 _case(rng, 3, 3, 5),  # t == heads: appending along axis 0 still fits
                 _case(rng, 2, 5, 16, magnitude=8.0),  # scores in the hundreds: no overflow
                 _case(rng, 4, 64, 8)]
    compare_cases(student, "decode_step", cases, attention.decode_step, returns="list", hidden=hidden, compare=_compare)
    if hidden:
        compare_property(student, "decode_step", CASES(), attention.decode_step, rng=rng, returns="list", hidden=hidden,
                         compare=_compare)

