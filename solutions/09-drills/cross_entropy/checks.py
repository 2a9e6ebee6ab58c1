"""Checks: mean cross-entropy from float32 logits and int64 targets, stable, with ignore_index.

`stable_loss` has no ignored rows: hidden cases add, on every seed, logits around 1e4 (exp overflows unless the
maximum is subtracted), a target 1000 below its row's maximum (its softmax underflows to 0, so log(softmax) is
-inf while the loss is about 1000), one class (loss 0), one row, a wide row; then a property check.
`ignored_rows`: rows whose target is ignore_index leave both the sum and the count, with the default -100 and with
ignore_index = 0 (a valid class); every row ignored, and no rows at all, give NaN; then a property check.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.softmax import cross_entropy
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-7, 1e-7)


def _case(logits, targets, ignore_index=None) -> dict:
    case = {"logits": np.asarray(logits, dtype=np.float32), "targets": np.asarray(targets, dtype=np.int64)}
    if ignore_index is not None:
        case["ignore_index"] = ignore_index
    return case


def _random(rng, n, c, scale=3.0, ignored=0.0, ignore_index=-100) -> dict:
    targets = rng.integers(0, c, n)
    targets[rng.random(n) < ignored] = ignore_index
    return _case(scale * rng.standard_normal((n, c)), targets, None if ignore_index == -100 else ignore_index)


def _logits(values, ignore_index=None):
    """Cases of 0 to 5 rows and 1 to 6 classes; with ignore_index, some targets are it."""
    def draw(shape):
        n, c = shape
        target = st.integers(0, c - 1) if ignore_index is None else st.one_of(st.integers(0, c - 1),
                                                                               st.just(ignore_index))
        case = {"logits": hnp.arrays(np.float32, (n, c), elements=values),
                "targets": hnp.arrays(np.int64, n, elements=target)}
        if ignore_index is not None and ignore_index != -100:
            case["ignore_index"] = st.just(ignore_index)
        return st.fixed_dictionaries(case)
    return st.tuples(st.integers(0 if ignore_index is not None else 1, 5), st.integers(1, 6)).flatmap(draw)


STABLE = _logits(st.one_of(st.floats(-30, 30, width=32), st.floats(-1e4, 1e4, width=32)))
IGNORED = st.one_of(_logits(st.floats(-30, 30, width=32), -100), _logits(st.floats(-30, 30, width=32), 0))


def _hint(case, got, expected) -> str:
    if isinstance(got, float) and not np.isnan(expected) and not np.isfinite(got):
        return "a loss of inf or NaN: exp overflowed, or log was taken of a probability that underflowed to 0"
    return ""


@check(points=2)
def stable_loss(student, rng, hidden):
    """cross_entropy(logits, targets): the mean of logsumexp(row) - row[target], stable for any logits."""
    cases = [_case([[2.0, 1.0, 0.1], [0.5, 2.5, -1.0]], [0, 1]), _random(rng, 4, 5)]
    if hidden:
        c = int(rng.integers(4, 9))
        far = rng.standard_normal((3, c))
        far[:, 0] -= 1000  # target 0, 1000 below the maximum
        cases = [_case(1e4 + rng.standard_normal((4, c)), rng.integers(0, c, 4)),  # exp(1e4) overflows
                 _case(far, [0, 0, 0]),
                 _case(rng.standard_normal((3, 1)), [0, 0, 0]),  # one class: loss 0
                 _random(rng, 1, c),
                 _random(rng, 5, 1000, scale=10.0)]
    compare_cases(student, "cross_entropy", cases, cross_entropy, returns="number", hidden=hidden,
                  tolerance=TOLERANCE, hint=_hint)
    if hidden:
        compare_property(student, "cross_entropy", STABLE, cross_entropy, rng=rng, returns="number", hidden=hidden,
                         tolerance=TOLERANCE, hint=_hint)


@check(points=1)
def ignored_rows(student, rng, hidden):
    """Rows whose target is ignore_index leave the sum and the count; every row ignored gives NaN."""
    cases = [_case([[2.0, 1.0, 0.1], [0.5, 2.5, -1.0], [1.0, 1.0, 1.0]], [0, -100, 2]),
             _case([[2.0, 1.0], [0.5, 2.5]], [-100, -100])]
    if hidden:
        c = int(rng.integers(3, 9))
        logits = 3 * rng.standard_normal((8, c))
        cases = [_case(logits, [0, -100, 1, -100, -100, 2, 0, -100]),
                 _case(logits[:6], [0, 1, 0, 2, 0, 1], ignore_index=0),  # a valid class ignored
                 _case(logits[:3], [-100, -100, -100]),  # every row ignored: NaN
                 _case(np.zeros((0, c)), np.zeros(0)),  # no rows: NaN
                 _random(rng, 50, 200, ignored=0.3)]
    compare_cases(student, "cross_entropy", cases, cross_entropy, returns="number", hidden=hidden,
                  tolerance=TOLERANCE)
    if hidden:
        compare_property(student, "cross_entropy", IGNORED, cross_entropy, rng=rng, returns="number", hidden=hidden,
                         tolerance=TOLERANCE)
