"""Prefix sums (scans) of integer vectors, inclusive and exclusive, and segmented by flags.

inclusive[i] = x[0] + ... + x[i]; exclusive[i] = x[0] + ... + x[i - 1] (0 at i = 0), the inclusive scan less x.
A segmented scan restarts at every element whose flag is set (element 0 always starts a segment): each segment
is scanned as a vector of its own. The scan is the building block of stream compaction, radix sort and sparse
formats (Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990); the segmented form is how a
GPU scans many short rows at once. Results are int64 whatever the integer input: an int32 running sum overflows
after a few large terms.
"""

import numpy as np


def _integers(x) -> np.ndarray:
    array = np.asarray(x)
    if array.ndim != 1 or array.dtype not in (np.int32, np.int64):
        raise ValueError(f"x must be a 1-D int32 or int64 array, got shape {array.shape} and dtype {array.dtype}")
    return array.astype(np.int64)


def prefix_sum(x, exclusive: bool = False) -> np.ndarray:
    """The inclusive (or, with `exclusive`, exclusive) prefix sums of the integer vector x, as int64."""
    x = _integers(x)
    inclusive = np.cumsum(x, dtype=np.int64)
    return inclusive - x if exclusive else inclusive


def segmented_prefix_sum(x, flags, exclusive: bool = False) -> np.ndarray:
    """prefix_sum within each segment of x: a segment starts at every i with flags[i] set, and at 0."""
    x = _integers(x)
    starts = np.asarray(flags)
    if starts.shape != x.shape or starts.dtype != np.bool_:
        raise ValueError(f"flags must be a bool array of x's shape {x.shape}, got shape {starts.shape} and dtype "
                         f"{starts.dtype}")
    starts = starts.copy()
    starts[:1] = True  # element 0 starts a segment, flagged or not
    inclusive = np.cumsum(x, dtype=np.int64)
    before = (inclusive - x)[starts]  # the running total just before each segment starts
    segment = np.cumsum(starts) - 1  # the segment of each element
    within = inclusive - before[segment]
    return within - x if exclusive else within
