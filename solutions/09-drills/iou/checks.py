"""Checks: IoU of every pair of boxes.

Visible cases are two small fixed sets. Hidden cases add the edges an interviewer probes (touching
boxes, nested boxes, zero-area boxes, an empty set) and a property check: boxes drawn by hypothesis,
the first failing set shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.detection import box_iou
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-9, 1e-12)


def _boxes(corners: np.ndarray) -> np.ndarray:
    """(n, 4) arbitrary numbers -> valid boxes: each pair of coordinates sorted."""
    xs, ys = np.sort(corners[:, [0, 2]], axis=1), np.sort(corners[:, [1, 3]], axis=1)
    return np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], axis=1)


# small integer coordinates: ties, touching edges and zero areas come up often
CORNERS = hnp.arrays(np.float64, st.tuples(st.integers(0, 6), st.just(4)), elements=st.integers(-4, 4).map(float))
PAIRS = st.fixed_dictionaries({"a": CORNERS.map(_boxes), "b": CORNERS.map(_boxes)})


@check(points=2)
def iou(student, rng, hidden):
    """box_iou(a, b): the (n, m) float64 IoU of every pair, 0 for touching boxes and for an empty union."""
    cases = [{"a": np.array([[0.0, 0, 2, 2]]), "b": np.array([[1.0, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]])},
             {"a": np.array([[0.0, 0, 4, 2], [1, 1, 2, 2]]), "b": np.array([[2.0, 0, 6, 2]])}]
    if hidden:
        cases = [{"a": np.array([[0.0, 0, 1, 1]]), "b": np.array([[1.0, 0, 2, 1], [1, 1, 2, 2]])},  # touching
                 {"a": np.array([[0.0, 0, 10, 10]]), "b": np.array([[2.0, 2, 3, 3]])},  # nested
                 {"a": np.array([[1.0, 1, 1, 1], [0, 0, 0, 5]]), "b": np.array([[1.0, 1, 1, 1], [0, 0, 3, 3]])},
                 {"a": np.zeros((0, 4)), "b": np.array([[0.0, 0, 1, 1]])},
                 {"a": _boxes(rng.uniform(-1e3, 1e3, (50, 4))), "b": _boxes(rng.uniform(-1e3, 1e3, (40, 4)))}]
    compare_cases(student, "box_iou", cases, box_iou, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float64")
    if hidden:
        compare_property(student, "box_iou", PAIRS, box_iou, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float64")
