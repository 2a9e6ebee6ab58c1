"""Checks: LayerNorm backward, (dx, dgamma, dbeta) from x, gamma and a random upstream gradient dy, in float64.

Visible cases are two small fixed sets of rows. Hidden cases add, on every seed: one row (dgamma summed over a single
row still has shape (N,)), rows of one element (dx = 0), constant rows (xhat = 0, rstd = 1 / sqrt(eps)), no rows
(dgamma = dbeta = 0), a large eps, rows of 1000; then a property check over arrays drawn by hypothesis.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.normalization import layer_norm_backward
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-7, 1e-8)
NAMES = ("dx", "dgamma", "dbeta")


def _case(x, rng, eps=1e-5) -> dict:
    x = np.asarray(x, dtype=np.float64)
    return {"x": x, "gamma": 1 + 0.5 * rng.standard_normal(x.shape[1]), "dy": rng.standard_normal(x.shape),
            "eps": eps}


def _arrays(shape):
    m, n = shape
    values = st.floats(-10, 10)
    return st.fixed_dictionaries({"x": hnp.arrays(np.float64, (m, n), elements=values),
                                  "gamma": hnp.arrays(np.float64, n, elements=values),
                                  "dy": hnp.arrays(np.float64, (m, n), elements=values),
                                  "eps": st.sampled_from([1e-5, 1e-2, 1.0])})


CASES = st.tuples(st.integers(0, 4), st.integers(1, 6)).flatmap(_arrays)


def _hint(case, got, expected) -> str:
    if not (isinstance(got, list) and len(got) == 3 and all(isinstance(g, np.ndarray) for g in got)):
        return "Return the tuple (dx, dgamma, dbeta) of three arrays"
    m, n = case["x"].shape
    if got[1].shape != (n,) or got[2].shape != (n,):
        return f"dgamma and dbeta have one value per column, shape ({n},): sum over the rows"
    wrong = [name for name, g, e in zip(NAMES, got, expected, strict=True)
             if not np.allclose(g, e, rtol=TOLERANCE[0], atol=TOLERANCE[1])]
    if wrong == ["dx"]:
        return ("dgamma and dbeta are right, dx is not: it has a direct term and two corrections, the paths through "
                "the row's mean and through its variance, each reached through gamma")
    return f"{' and '.join(wrong)} differ" if wrong else ""


@check(points=3)
def gradients(student, rng, hidden):
    """layer_norm_backward(x, gamma, dy, eps): dx with both correction terms, dgamma and dbeta summed over rows."""
    cases = [_case([[1.0, 2.0, 4.0], [0.0, -1.0, 3.0]], rng), _case(rng.uniform(-2, 2, (4, 5)), rng)]
    if hidden:
        n = int(rng.integers(4, 10))
        cases = [_case(rng.uniform(-3, 3, (1, n)), rng),  # one row
                 _case(rng.uniform(-3, 3, (4, 1)), rng),  # one element per row: dx = 0
                 _case(np.repeat(rng.uniform(-3, 3, (3, 1)), n, axis=1), rng),  # constant rows
                 _case(np.zeros((0, n)), rng),  # no rows: dgamma = dbeta = 0
                 _case(rng.standard_normal((5, n)), rng, eps=1.0),
                 _case(5 * rng.standard_normal((6, 1000)) + 2, rng)]
    compare_cases(student, "layer_norm_backward", cases, layer_norm_backward, returns="list", hidden=hidden,
                  tolerance=TOLERANCE, hint=_hint)
    if hidden:
        compare_property(student, "layer_norm_backward", CASES, layer_norm_backward, rng=rng, returns="list",
                         hidden=hidden, tolerance=TOLERANCE, hint=_hint)
