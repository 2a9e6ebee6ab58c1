"""Checks: greedy non-maximum suppression.

Visible cases are two small fixed sets. Hidden cases add the edges an interviewer probes (an IoU exactly at
the threshold, equal scores, a chain where a suppressed box would wrongly suppress the next, zero-area boxes,
thresholds 0 and 1, one box, no boxes) and a property check: small boxes on an integer grid with few distinct
scores (so ties and exact IoUs come up often) drawn by hypothesis, the first failing set shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview.detection import nms
from aisys_grader.checks import check, compare_cases, compare_property


def _boxes(corners: np.ndarray) -> np.ndarray:
    """(n, 4) arbitrary numbers -> valid boxes: each pair of coordinates sorted."""
    xs, ys = np.sort(corners[:, [0, 2]], axis=1), np.sort(corners[:, [1, 3]], axis=1)
    return np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], axis=1)


def _case(boxes, scores, iou_threshold) -> dict:
    return {"boxes": np.array(boxes, dtype=np.float64).reshape(-1, 4), "scores": np.array(scores, dtype=np.float64),
            "iou_threshold": iou_threshold}


@st.composite
def _sets(draw) -> dict:
    n = draw(st.integers(0, 10))
    corners = draw(hnp.arrays(np.float64, (n, 4), elements=st.integers(0, 6).map(float)))
    scores = draw(hnp.arrays(np.float64, (n,), elements=st.integers(0, 3).map(float)))  # few values: ties
    threshold = draw(st.sampled_from([0.0, 0.2, 0.25, 1 / 3, 0.5, 0.7, 1.0]))  # IoUs of grid boxes hit these
    return {"boxes": _boxes(corners), "scores": scores, "iou_threshold": threshold}


@check(points=3)
def nms_keeps(student, rng, hidden):
    """nms(boxes, scores, iou_threshold): the int64 indices kept, by descending score, ties lower index first."""
    cases = [_case([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], [0.9, 0.8, 0.7], 0.5),
             _case([[0, 0, 4, 4], [0, 0, 4, 3], [5, 5, 6, 6], [0, 1, 4, 4]], [0.5, 0.9, 0.1, 0.8], 0.6)]
    if hidden:
        cases = [_case([[0, 0, 4, 1], [0, 0, 2, 1]], [0.9, 0.8], 0.5),  # IoU exactly 0.5: not suppressed
                 _case([[0, 0, 1, 1], [1, 0, 2, 1], [0, 0, 1, 1]], [0.5, 0.6, 0.4], 0.0),  # touching at threshold 0
                 _case([[0, 0, 2, 2], [5, 5, 6, 6], [0, 0, 2, 2], [5, 5, 6, 6]], [0.7, 0.7, 0.7, 0.7], 0.5),  # ties
                 _case([[0, 0, 2, 1], [1, 0, 3, 1], [2, 0, 4, 1]], [0.9, 0.8, 0.7], 0.3),  # a chain A > B > C
                 _case([[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 2, 2], [0, 0, 0, 3]], [0.3, 0.4, 0.2, 0.9], 0.0),
                 _case([[0, 0, 2, 2], [0, 0, 2, 2], [0, 0, 2, 1]], [0.1, 0.3, 0.2], 1.0),  # nothing suppressed
                 _case([[0, 0, 1, 1]], [0.5], 0.5),
                 _case(np.zeros((0, 4)), [], 0.5)]
        centres = rng.uniform(0, 100, (300, 2))  # a crowded image: many overlaps
        sizes = rng.uniform(0, 20, (300, 2))
        cases.append(_case(np.hstack([centres - sizes, centres + sizes]), rng.integers(0, 20, 300) / 20,
                           float(rng.uniform(0.2, 0.7))))
    compare_cases(student, "nms", cases, nms, returns="array", hidden=hidden, tolerance=(0, 0), dtype="int64")
    if hidden:
        compare_property(student, "nms", _sets(), nms, rng=rng, returns="array", hidden=hidden, tolerance=(0, 0),
                         dtype="int64")
