# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: prefix sums: inclusive, exclusive and segmented
#
# **You will learn** to write the scan, an interview favourite and the building block of stream
# compaction, radix sort and sparse formats: the inclusive and exclusive prefix sums of a vector,
# and the **segmented** scan, which restarts at every flagged element, the way a GPU scans many
# short rows (or the tokens of many sequences packed into one batch) in one pass.
#
# **The conventions, all of them:**
# - `x` is a 1-D numpy array of `int32` or `int64`, of $n \ge 0$ elements;
# - `prefix_sum(x, exclusive)` returns the **inclusive** scan, `out[i] = x[0] + ... + x[i]`, when
#   `exclusive` is False, and the **exclusive** scan, `out[i] = x[0] + ... + x[i-1]` (so
#   `out[0] = 0`), when it is True;
# - `segmented_prefix_sum(x, flags, exclusive)` takes `flags`, a `bool` array of x's length:
#   `flags[i]` True means a new segment **starts at** element `i`; element 0 always starts a
#   segment, whether `flags[0]` is set or not. Each segment is scanned on its own, inclusive or
#   exclusive as above: the exclusive scan is 0 at every segment's first element;
# - the result is always a new **`int64`** array of x's length (an empty one for an empty `x`),
#   exact: the inputs are such that every sum fits in int64, but an `int32` input's sums need not
#   fit in int32 (add in int64);
# - results are compared exactly, and their dtype too.
#
# The hidden cases probe an empty array, one element, every element flagged, none flagged,
# `flags[0]` unset, int32 values near $2^{31}$, negative numbers, and small arrays drawn at
# random (the smallest failing one is shown).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/prefix_sum", globals())

# %% tags=["solution"]
def prefix_sum(x, exclusive: bool) -> np.ndarray:
    """The inclusive (or exclusive) prefix sums of the integer vector x, as a new int64 array."""
    ### BEGIN SOLUTION
    x = np.asarray(x).astype(np.int64)  # before adding: an int32 running sum overflows
    inclusive = np.cumsum(x)
    if exclusive:
        return inclusive - x
    return inclusive
    ### END SOLUTION


def segmented_prefix_sum(x, flags, exclusive: bool) -> np.ndarray:
    """prefix_sum restarted at every flagged element (and at element 0), as a new int64 array."""
    ### BEGIN SOLUTION
    x = np.asarray(x).astype(np.int64)
    starts = np.array(flags, dtype=bool)
    starts[:1] = True  # element 0 starts a segment, flagged or not
    inclusive = np.cumsum(x)
    before = (inclusive - x)[starts]  # the running total just before each segment starts
    within = inclusive - before[np.cumsum(starts) - 1]  # less that of the element's own segment
    return within - x if exclusive else within
    ### END SOLUTION


# %%
x = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int32)
flags = np.array([0, 0, 1, 0, 0, 1, 1, 0], dtype=bool)
print(prefix_sum(x, False), prefix_sum(x, True))
print(segmented_prefix_sum(x, flags, False), segmented_prefix_sum(x, flags, True))

# %% [markdown]
# Expected: `[3 4 8 9 14 23 25 31]`, `[0 3 4 8 9 14 23 25]`; segments `[3 1] [4 1 5] [9] [2 6]`
# give `[3 4 4 5 10 9 2 8]` and `[0 3 0 4 5 0 0 2]`.

# %% tags=["check"]
check("prefix_sum")
### BEGIN HIDDEN TESTS
check("prefix_sum", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("segmented_prefix_sum")
### BEGIN HIDDEN TESTS
check("segmented_prefix_sum", hidden=True)
### END HIDDEN TESTS
