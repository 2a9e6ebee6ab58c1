# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: top-k along the last axis
#
# **You will learn** to select the k largest entries of each row, with their indices, the way top-k
# sampling, beam search and mixture-of-experts routing do (`torch.topk`), and to say exactly what
# happens at the edges an interviewer probes: ties, k = 0, and k larger than the row.
#
# **The conventions, all of them:**
# - `top_k(x, k)` takes `x`, a float array of any shape with at least one axis (the last axis, of length
#   `n`, holds the rows; `n` may be 0; no NaN, but -inf and inf may appear) and `k`, an int >= 0;
# - it returns the tuple `(values, indices)`, both of shape `x.shape[:-1] + (min(k, n),)`: `values` in
#   `x`'s dtype, `indices` int64, with `values == np.take_along_axis(x, indices, axis=-1)`;
# - along each row, the entries are sorted **largest first**; equal values come in order of their index,
#   the **lower index first** (so a row of equal values gives indices 0, 1, 2, ...); -0.0 and 0.0 are equal;
# - `k > n` is not an error: it returns all `n` entries, sorted as above;
# - `k = 0` returns arrays whose last axis has length 0;
# - values and indices are compared exactly.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/top_k", globals())

# %% tags=["solution"]
def top_k(x, k):
    """(values, int64 indices) of the k largest entries along the last axis, largest first, ties by lower index."""
    ### BEGIN SOLUTION
    x = np.asarray(x)
    order = np.argsort(-x, axis=-1, kind="stable")  # stable: equal values keep index order
    indices = order[..., :k]  # slicing past the end stops at n
    return np.take_along_axis(x, indices, axis=-1), indices.astype(np.int64)
    ### END SOLUTION


# %% tags=["check"]
check("top_k")
### BEGIN HIDDEN TESTS
check("top_k", hidden=True)
### END HIDDEN TESTS
