"""Checks: rotary position embedding in both layouts.

Visible cases are two small fixed ones, one per layout. Hidden cases add the edges an interviewer
probes (position 0 is the identity, no tokens, one pair of features, positions out of order and
repeated, a large position, a decode step at position 57) in both layouts, and a property check:
inputs drawn by hypothesis, the first failing one shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.inference.model import rope as model_rope
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-9, 1e-9)
STYLES = ("interleaved", "half")


def reference(x, positions, style):
    return model_rope(x, positions, style=style)


@st.composite
def CASES(draw):
    seq, heads, half = draw(st.integers(0, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    x = draw(hnp.arrays(np.float64, (seq, heads, 2 * half), elements=st.floats(-2, 2)))
    positions = draw(hnp.arrays(np.int64, (seq,), elements=st.integers(0, 4096)))
    return {"x": x, "positions": positions, "style": draw(st.sampled_from(STYLES))}


def _case(rng, seq, heads, d, positions, style) -> dict:
    return {"x": rng.standard_normal((seq, heads, d)), "positions": np.asarray(positions, dtype=np.int64),
            "style": style}


@check(points=2)
def rope(student, rng, hidden):
    """rope(x, positions, style): x (seq, heads, head_dim) rotated pair by pair, float64, in either layout."""
    fixed = np.random.default_rng(0)
    cases = [_case(fixed, 3, 2, 4, [0, 1, 2], "interleaved"), _case(fixed, 3, 1, 6, [5, 1, 3], "half")]
    if hidden:
        cases = [case for style in STYLES for case in (
            _case(rng, 2, 2, 8, [0, 0], style),  # position 0: the identity
            _case(rng, 0, 2, 4, [], style),  # no tokens
            _case(rng, 3, 1, 2, [1, 2, 3], style),  # one pair: both layouts agree
            _case(rng, 4, 3, 8, [9, 2, 2, 0], style),  # out of order, repeated
            _case(rng, 1, 4, 16, [57], style),  # a decode step: one token at position 57
            _case(rng, 2, 2, 16, [100_000, 3], style),  # a large position: the slow pairs matter
        )]
    compare_cases(student, "rope", cases, reference, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float64")
    if hidden:
        compare_property(student, "rope", CASES(), reference, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float64")
