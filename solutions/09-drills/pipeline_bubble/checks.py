"""Checks: the makespan and bubble of 1F1B with per-stage times, against the reference simulator.

Visible cases: equal stages (where the bubble is (p-1)/(m+p-1)), a slow middle stage, m < p. Hidden cases add
the edges an interviewer probes (one stage, one micro-batch, a slow first or last stage, backwards faster than
forwards) and a property check over small random pipelines, the first failing one shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.parallel import pipeline
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-9, 1e-12)  # sums of at most a few dozen float64 times: rounding stays near 1e-15


def _case(p, m, forward, backward) -> dict:
    return {"p": p, "m": m, "t_forward": np.array(forward, dtype=np.float64),
            "t_backward": np.array(backward, dtype=np.float64)}


def _hint(case, got, expected) -> str:
    return ("is each operation started at the later of its stage's free time and its input's finish, and is the "
            "idle time counted between operations too, over p times the makespan?")


@st.composite
def _pipelines(draw):
    p, m = draw(st.integers(1, 5)), draw(st.integers(1, 8))
    times = st.lists(st.integers(1, 6).map(float), min_size=p, max_size=p)
    return _case(p, m, draw(times), draw(times))


@check(points=3)
def makespan_and_bubble(student, rng, hidden):
    """one_f_one_b_time(p, m, t_forward, t_backward): [makespan, bubble] of 1F1B, float64."""
    cases = [_case(4, 8, [1] * 4, [2] * 4), _case(3, 4, [1, 3, 1], [2, 6, 2]), _case(4, 2, [1, 1, 1, 1], [1, 1, 1, 1])]
    if hidden:
        cases = [_case(1, 5, [2.0], [3.0]), _case(5, 1, [1, 2, 3, 4, 5], [1, 1, 1, 1, 1]),
                 _case(3, 6, [4, 1, 1], [8, 2, 2]), _case(3, 6, [1, 1, 4], [2, 2, 8]),
                 _case(2, 3, [3, 3], [1, 1]),
                 _case(4, 7, *(rng.uniform(0.5, 3, (2, 4)).tolist()))]
    compare_cases(student, "one_f_one_b_time", cases, pipeline.one_f_one_b_time, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float64",
                  hint=_hint)
    if hidden:
        compare_property(student, "one_f_one_b_time", _pipelines(), pipeline.one_f_one_b_time, rng=rng, returns="array",
                         hidden=hidden, tolerance=TOLERANCE, dtype="float64", examples=30)

