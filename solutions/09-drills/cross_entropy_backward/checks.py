"""Checks: the gradient of mean cross-entropy from logits with ignore_index, times a random upstream dloss, float64.

Visible cases are two small fixed sets of rows, one with ignored rows. Hidden cases add, on every seed: one row, one
class (the gradient is 0), a valid class as ignore_index, a single kept row, every row ignored (zeros, not NaN),
logits 1e3 apart (the target's probability underflows to 0), rows of 1000 classes; then a property check over arrays
drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.autograd.backward import cross_entropy_backward
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-7, 1e-9)  # float64 both sides, summed in other orders: rounding only


def _case(logits, targets, rng, ignore_index=-100) -> dict:
    return {"logits": np.asarray(logits, dtype=np.float64), "targets": np.asarray(targets, dtype=np.int64),
            "dloss": float(rng.uniform(0.5, 2) * rng.choice([-1, 1])), "ignore_index": ignore_index}


def _arrays(shape):
    n, c = shape
    return st.fixed_dictionaries({
        "logits": hnp.arrays(np.float64, (n, c), elements=st.floats(-100, 100)),
        "targets": hnp.arrays(np.int64, n, elements=st.integers(-1, c - 1)),
        "dloss": st.floats(-3, 3),
        "ignore_index": st.just(-1)})


CASES = st.tuples(st.integers(1, 6), st.integers(1, 6)).flatmap(_arrays)


def _hint(case, got, expected) -> str:
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return "Return dlogits, an array of logits' shape (N, C)"
    if np.isnan(got).any():
        return ("NaN: exp overflowed, a probability of 0 was divided by, or 0 kept rows were divided by; with every "
                "row ignored the gradient is all zeros")
    ignored = case["targets"] == case["ignore_index"]
    if ignored.any() and not np.allclose(got[ignored], 0):
        return "an ignored row takes no part in the loss: its gradient is 0"
    if ignored.any() and (~ignored).any() and np.allclose(got * len(ignored), expected * (~ignored).sum()):
        return "the mean is over the kept rows only: divide by their number, not by N"
    return ""


@check(points=3)
def gradients(student, rng, hidden):
    """cross_entropy_backward(logits, targets, dloss, ignore_index) = dloss * (softmax - onehot) / kept rows."""
    cases = [_case([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [1, 2], rng),
             _case(rng.standard_normal((5, 4)), [3, -100, 0, -100, 2], rng)]
    if hidden:
        c = int(rng.integers(3, 8))
        spread = 1000 * rng.standard_normal((4, c))
        cases = [_case(rng.standard_normal((1, c)), [c - 1], rng),  # one row
                 _case(rng.standard_normal((3, 1)), [0, 0, 0], rng),  # one class: the loss is 0 whatever x
                 _case(rng.standard_normal((6, c)), [0, 1, 0, 2, 0, 1], rng, ignore_index=0),  # a class ignored
                 _case(rng.standard_normal((4, c)), [-100, -100, 1, -100], rng),  # one kept row
                 _case(rng.standard_normal((3, c)), [-100, -100, -100], rng),  # none kept: zeros
                 _case(spread, spread.argmin(axis=1), rng),  # target probabilities underflow to 0
                 _case(1000 + rng.standard_normal((3, c)), [0, 1, 2], rng),  # exp(1000) overflows
                 _case(3 * rng.standard_normal((4, 1000)), rng.integers(0, 1000, 4), rng)]
    compare_cases(student, "cross_entropy_backward", cases, cross_entropy_backward, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float64", hint=_hint)
    if hidden:
        compare_property(student, "cross_entropy_backward", CASES, cross_entropy_backward, rng=rng, returns="array",
                         hidden=hidden, tolerance=TOLERANCE, dtype="float64", hint=_hint)
