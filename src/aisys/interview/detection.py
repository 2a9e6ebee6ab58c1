"""Object detection's box arithmetic: intersection over union, the quantity NMS thresholds."""

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
