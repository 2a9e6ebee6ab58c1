# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: nucleus (top-p) sampling
#
# **You will learn** to write nucleus sampling (Holtzman et al. 2020, "The Curious Case of Neural Text
# Degeneration", section 3.1): sample only from the smallest set of most likely tokens whose total
# probability reaches p, the default decoding of most chat models. Here the random number is an argument,
# so the function is deterministic and every detail (the crossing token, renormalising, where the
# temperature goes) shows in the answer.
#
# **The conventions, all of them:**
# - `top_p(logits, temperature, p, u)`: `logits` a finite float64 array of shape `(V,)`, `V >= 1`;
#   `temperature >= 0`; `0 < p <= 1`; `u` a uniform number in `[0, 1)`; returns a token id, an `int`;
# - `temperature == 0` is greedy: return the index of the largest logit (the lowest such index on a tie),
#   whatever `p` and `u`;
# - otherwise the probabilities are `softmax(logits / temperature)` in float64 (temperature divides the
#   **logits**, before the softmax; subtract the maximum so that nothing overflows);
# - sort the tokens by probability, **largest first**; equal probabilities in order of index, the
#   **lower index first**;
# - the cumulative sums `c_j` of the sorted probabilities (`np.cumsum`); keep the **shortest prefix whose
#   sum reaches p**: tokens `0 .. m` of the sorted order, `m` the first `j` with `c_j >= p`, so the token
#   that crosses `p` **is kept** (with `p = 1`, all tokens; if rounding keeps every `c_j` below `p`, all `V`);
# - **renormalise** the kept probabilities: divide each by their sum `c_m`, and take their cumulative sums
#   `r_j` (`np.cumsum`; the last is 1 up to rounding);
# - return the kept token at the first `j` with `r_j > u` (strictly; so `u = 0` gives the first kept
#   token); if rounding keeps every `r_j <= u`, the last kept token;
# - the answer is compared exactly; the checks never put `p` or `u` within rounding of a boundary `c_j`,
#   `r_j` except where the probabilities are exact (equal logits: 1/2, 1/4).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/top_p", globals())

# %% tags=["solution"]
def top_p(logits, temperature, p, u) -> int:
    """The token nucleus sampling picks for the uniform draw u: an int."""
    ### BEGIN SOLUTION
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))  # argmax: the first of equal maxima
    z = logits / temperature
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")  # largest first, equal ones by lower index
    cumulative = np.cumsum(probs[order])
    m = min(int(np.searchsorted(cumulative, p, side="left")), len(order) - 1)  # the first c_j >= p: kept
    kept = probs[order[: m + 1]] / cumulative[m]
    j = int(np.searchsorted(np.cumsum(kept), u, side="right"))  # the first r_j > u
    return int(order[min(j, m)])
    ### END SOLUTION


# %% tags=["check"]
check("top_p")
### BEGIN HIDDEN TESTS
check("top_p", hidden=True)
### END HIDDEN TESTS
