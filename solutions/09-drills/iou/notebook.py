# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: intersection over union of boxes
#
# **You will learn** to compute the IoU of every pair of two sets of boxes at once, with the edge cases
# an interviewer probes: boxes that only touch, boxes inside boxes, and boxes of zero area. IoU is what
# non-maximum suppression thresholds and what detection metrics such as COCO's mAP are defined by.
#
# **The conventions, all of them:**
# - a box is `(x1, y1, x2, y2)`, its corners, with `x1 <= x2` and `y1 <= y2`; coordinates are real
#   numbers (not pixel indices: a box from 0 to 2 has width 2, not 3);
# - `box_iou(a, b)` takes `a` of shape `(n, 4)` and `b` of shape `(m, 4)` and returns the `(n, m)`
#   float64 array whose entry `[i, j]` is the IoU of `a[i]` and `b[j]`; `n` or `m` may be 0;
# - boxes that only touch along an edge or at a corner have IoU 0;
# - where the union has no area (two zero-area boxes) the IoU is 0, never NaN;
# - results are compared with a relative tolerance of 1e-9.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/iou", globals())

# %% tags=["solution"]
def box_iou(a, b) -> np.ndarray:
    """The (n, m) float64 IoU of every box of a with every box of b; 0 where the union has no area."""
    ### BEGIN SOLUTION
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    width = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    height = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = width * height
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    ### END SOLUTION


# %% tags=["check"]
check("iou")
### BEGIN HIDDEN TESTS
check("iou", hidden=True)
### END HIDDEN TESTS
