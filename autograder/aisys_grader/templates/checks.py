"""Checks: what the checks grade, and which edge cases the hidden ones add.

Visible cases are fixed; hidden cases are drawn from the seed and add the edges (an empty vector,
a zero factor, large magnitudes).
"""

import numpy as np

from aisys_grader.checks import check, compare_cases


def reference(x, factor):
    """The answer key: in a real exercise, a function of the aisys module named in spec.toml's `reference`."""
    return np.asarray(x, dtype=np.float64) * factor


@check(points=1)
def scales(student, rng, hidden):
    """scale(x, factor) returns factor * x in float64."""
    cases = [{"x": np.arange(5.0), "factor": 2.0}, {"x": np.ones(3), "factor": -0.5}]
    if hidden:
        cases = [{"x": np.zeros(0), "factor": 3.0}, {"x": rng.standard_normal(100) * 1e6, "factor": 0.0},
                 {"x": rng.standard_normal(1000), "factor": float(rng.uniform(-10, 10))}]
    compare_cases(student, "scale", cases, reference, returns="array", hidden=hidden)
