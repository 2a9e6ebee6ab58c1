"""Object detection's box arithmetic: intersection over union, and greedy non-maximum suppression (NMS) on it."""

import math
from numbers import Real

import numpy as np


def _boxes(name: str, boxes) -> np.ndarray:
    array = np.asarray(boxes, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 4:
        raise ValueError(f"{name} must be an (n, 4) array of (x1, y1, x2, y2) boxes, got shape {array.shape}")
    if not np.isfinite(array).all() or (array[:, 2] < array[:, 0]).any() or (array[:, 3] < array[:, 1]).any():
        raise ValueError(f"{name} must hold finite boxes with x1 <= x2 and y1 <= y2")
    return array


def box_iou(a, b) -> np.ndarray:
    """IoU of every box of `a` (n, 4) with every box of `b` (m, 4), corners (x1, y1, x2, y2): an (n, m) float64
    array. Boxes that only touch, or whose union has no area (two zero-area boxes), have IoU 0."""
    a, b = _boxes("a", a), _boxes("b", b)
    width = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    height = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = width * height
    area = lambda boxes: (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def nms(boxes, scores, iou_threshold) -> np.ndarray:
    """Greedy non-maximum suppression: the int64 indices of the boxes kept, highest score first.

    Boxes are visited by descending score, ties by lower index first (a stable sort); a box still standing is kept
    and suppresses every later box whose IoU with it is strictly greater than `iou_threshold`. A suppressed box
    suppresses nothing. `iou_threshold` is a number in [0, 1].
    """
    boxes = _boxes("boxes", boxes)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(boxes),) or not np.isfinite(scores).all():
        raise ValueError(f"scores must be {len(boxes)} finite numbers, one per box, got shape {scores.shape}")
    if isinstance(iou_threshold, bool) or not isinstance(iou_threshold, Real) \
            or not (math.isfinite(iou_threshold) and 0 <= iou_threshold <= 1):
        raise ValueError(f"iou_threshold must be a number in [0, 1], got {iou_threshold!r}")
    iou = box_iou(boxes, boxes)
    suppressed = np.zeros(len(boxes), dtype=bool)
    keep = []
    for i in np.argsort(-scores, kind="stable"):  # stable: equal scores keep index order
        if not suppressed[i]:
            keep.append(i)
            suppressed |= iou[i] > iou_threshold
    return np.array(keep, dtype=np.int64)
