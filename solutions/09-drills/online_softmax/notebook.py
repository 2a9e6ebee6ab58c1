# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: online softmax: one pass over a row in chunks
#
# **You will learn** the recurrence of Milakov & Gimelshein, *Online normalizer calculation for softmax*
# (2018), section 3: the statistics a stable softmax needs, the row's maximum `m` and the sum
# `d = sum(exp(x - m))`, kept up to date while the row goes by once, block by block. When a block raises
# the maximum from `m` to `m'`, every term already summed was taken relative to the old maximum, so the sum
# so far is rescaled by `exp(m - m')`:
#
#     m' = max(m, max(block))          d' = d * exp(m - m') + sum(exp(block - m'))
#
# A stable softmax otherwise reads the row twice before writing it (once for the maximum, once for the
# sum); FlashAttention (Dao et al. 2022, section 3.1) is this recurrence applied to the rows of an
# attention matrix that never exist in memory at once.
#
# **The conventions, all of them:**
# - a row is given as `chunks`, a list of `k >= 1` one-dimensional float32 arrays, in order; they may have
#   different lengths, and a chunk may be **empty**; the elements are finite numbers (no `inf`, no NaN);
# - `online_softmax_stats(chunks)` returns `(m, d)`, two **float64** arrays of length `k`: `m[i]` is the
#   largest element of `chunks[0]` to `chunks[i]`, and `d[i]` the sum of `exp(x - m[i])` over those
#   elements: the state **after each chunk**. Before any element the state is `m = -inf`, `d = 0`, so a
#   leading empty chunk gives `m[0] = -inf`, `d[0] = 0`; an empty chunk leaves the state as it was;
# - it reads the chunks once, in order, keeping only `m` and `d` between chunks: the check compares the
#   state after every chunk, which a solution that first finds the whole row's maximum does not have
#   (its `m[i]` is the row's maximum from the start);
# - compute the statistics in float64 (convert each chunk); they are compared with the definition above,
#   computed in float64, within a relative tolerance of 1e-9;
# - `online_softmax(chunks)` returns the softmax of the whole row (the chunks one after the other) as a
#   one-dimensional **float32** array: one pass for `(m, d)`, then `exp(x - m) / d` for every element
#   with the final `m` and `d`. The row holds at least one element in all; the result is compared with
#   the softmax computed in float64 within a relative tolerance of 1e-5 and an absolute one of 1e-8.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/online_softmax", globals())

# %% tags=["solution"]
def online_softmax_stats(chunks) -> tuple[np.ndarray, np.ndarray]:
    """The running maximum m and rescaled sum d after each chunk, in one pass: two float64 arrays of len(chunks)."""
    ### BEGIN SOLUTION
    m, d = -np.inf, 0.0  # the statistics of no elements
    ms, ds = [], []
    for chunk in chunks:
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.size:  # an empty chunk changes nothing (and has no maximum)
            m_new = max(m, chunk.max())
            d = d * np.exp(m - m_new) + np.exp(chunk - m_new).sum()  # the old terms, rescaled to the new maximum
            m = m_new
        ms.append(m)
        ds.append(d)
    return np.array(ms, dtype=np.float64), np.array(ds, dtype=np.float64)
    ### END SOLUTION


def online_softmax(chunks) -> np.ndarray:
    """The softmax of the row the chunks make, as one float32 array: the statistics in one pass, then one write."""
    ### BEGIN SOLUTION
    m, d = online_softmax_stats(chunks)
    x = np.concatenate([np.asarray(chunk, dtype=np.float64) for chunk in chunks])
    return (np.exp(x - m[-1]) / d[-1]).astype(np.float32)
    ### END SOLUTION


# %% tags=["check"]
check("running_stats")
### BEGIN HIDDEN TESTS
check("running_stats", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_of_chunks")
### BEGIN HIDDEN TESTS
check("softmax_of_chunks", hidden=True)
### END HIDDEN TESTS
