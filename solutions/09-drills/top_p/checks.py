"""Checks: nucleus sampling with the uniform draw given: the token that crosses p kept, the kept probabilities
renormalised, the temperature on the logits, ties by lower index.

Visible cases are four small fixed ones. Hidden cases add the edges an interviewer probes: p reached exactly
at a token (equal logits: exact quarters), a u beyond p (needs the renormalisation), p = 1, a tiny p, u = 0,
temperature 0 with a tie, temperatures 0.5 and 2, ties in probability, logits in the thousands, one token,
then a property check: logits, temperature, p and u drawn by hypothesis, the first failing case shrunk to
the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview import decoding
from aisys_grader.checks import check, compare_cases, compare_property

# logits on a grid of halves: ties often, probabilities otherwise far from p and u drawn as floats
CASES = st.fixed_dictionaries({
    "logits": hnp.arrays(np.float64, st.integers(1, 8), elements=st.integers(-8, 8).map(lambda n: n / 2)),
    "temperature": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    "p": st.floats(0.01, 1.0),
    "u": st.floats(0.0, 1.0, exclude_max=True)})


def _case(logits, temperature, p, u) -> dict:
    return {"logits": np.array(logits, dtype=np.float64), "temperature": temperature, "p": p, "u": u}


@check(points=2)
def top_p(student, rng, hidden):
    """top_p(logits, temperature, p, u): the token nucleus sampling picks for u, an int."""
    cases = [_case([0.0, 1.0, 2.0, 3.0], 2.0, 0.5, 0.9), _case([3.0, 0.0, 1.0, 3.0, 2.0], 1.0, 0.8, 0.7),
             _case(np.zeros(4), 1.0, 0.5, 0.3), _case([1.0, 3.0, 3.0], 0.0, 0.9, 0.3)]
    if hidden:
        logits = rng.standard_normal(10) * 2
        cases = [_case(np.zeros(4), 1.0, 0.5, 0.6),  # sums exactly 1/4, 1/2: the token reaching p is kept
                 _case(np.zeros(8), 1.0, 0.25, 0.4),  # u past p: only the renormalised sums reach it
                 _case(logits, 1.0, 1.0, float(rng.uniform(0.9, 1.0))),  # p = 1: every token may come
                 _case(logits, 1.0, 1e-9, float(rng.uniform())),  # a tiny p: the most likely token
                 _case(logits, 1.0, 0.95, 0.0),  # u = 0: the first token kept
                 _case([1.0, 4.0, -2.0, 4.0], 0.0, 0.5, 0.9),  # greedy, the lower of two maxima
                 _case([0.0, 1.0, 2.0, 3.0], 0.5, 0.95, 0.985),  # a sharper distribution
                 _case([0.0, 1.0, 2.0, 3.0], 2.0, 0.5, 0.9),  # a flatter one
                 _case([1.0, 3.0, 3.0, 0.0], 1.0, 0.5, 0.3),  # tied probabilities: the lower index first
                 _case([1000.0, 999.0, 1001.0], 1.0, 0.9, 0.5),  # exp(1000) overflows without the max
                 _case([2.5], 1.5, 0.3, 0.7),  # one token
                 _case(rng.standard_normal(50), 1.0, float(rng.uniform(0.3, 0.9)), float(rng.uniform()))]
    compare_cases(student, "top_p", cases, decoding.top_p, returns="integer", hidden=hidden)
    if hidden:
        compare_property(student, "top_p", CASES, decoding.top_p, rng=rng, returns="integer", hidden=hidden)
