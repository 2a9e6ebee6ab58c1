# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: non-maximum suppression
#
# **You will learn** to write greedy non-maximum suppression (NMS), the step that turns a detector's
# thousands of overlapping candidate boxes into one box per object, with the edge cases an interviewer
# probes: equal scores, an IoU exactly at the threshold, chains of overlapping boxes, and no boxes at all.
#
# **The conventions, all of them:**
# - `nms(boxes, scores, iou_threshold)`: `boxes` is an `(n, 4)` float array of boxes `(x1, y1, x2, y2)`
#   with `x1 <= x2` and `y1 <= y2` (real coordinates: a box from 0 to 2 has width 2); `scores` is an
#   `(n,)` float array; `iou_threshold` is a number in `[0, 1]`;
# - IoU is intersection over union as in the `iou` drill: boxes that only touch have IoU 0, and a box of
#   zero area has IoU 0 with every box (itself included), so it is never suppressed and suppresses nothing;
# - the algorithm is greedy: visit the boxes by descending score; a box not yet suppressed is **kept**, and
#   suppresses every box whose IoU with it is **strictly greater** than `iou_threshold` (an IoU exactly
#   equal to the threshold does not suppress). A suppressed box suppresses nothing;
# - equal scores are visited lowest index first (a stable sort on descending score);
# - the result is a 1-D **int64** array of the indices (into the input) of the kept boxes, in the order
#   they were kept: descending score, ties by lower index;
# - `n` may be 0: the result is then an empty int64 array;
# - the result is compared exactly (indices, their order and the dtype).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/nms", globals())

# %% tags=["solution"]
def nms(boxes, scores, iou_threshold) -> np.ndarray:
    """Greedy NMS: the int64 indices of the boxes kept, by descending score (ties: lower index first)."""
    ### BEGIN SOLUTION
    boxes, scores = np.asarray(boxes, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    x1, y1, x2, y2 = boxes.T
    width = np.clip(np.minimum(x2[:, None], x2) - np.maximum(x1[:, None], x1), 0, None)
    height = np.clip(np.minimum(y2[:, None], y2) - np.maximum(y1[:, None], y1), 0, None)
    inter = width * height
    area = (x2 - x1) * (y2 - y1)
    union = area[:, None] + area - inter
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    order = np.argsort(-scores, kind="stable")  # descending score; equal scores keep index order
    suppressed = np.zeros(len(boxes), dtype=bool)
    keep = []
    for i in order:
        if suppressed[i]:
            continue  # a suppressed box suppresses nothing
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return np.array(keep, dtype=np.int64)
    ### END SOLUTION


# %% tags=["check"]
check("nms_keeps")
### BEGIN HIDDEN TESTS
check("nms_keeps", hidden=True)
### END HIDDEN TESTS
