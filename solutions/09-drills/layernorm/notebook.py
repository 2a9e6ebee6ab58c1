# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: LayerNorm forward
#
# **You will learn** to write LayerNorm (Ba, Kiros & Hinton, *Layer Normalization*, 2016, section 3)
# exactly as the frameworks define it, and the three details an interviewer checks: the variance is the
# *biased* one (divided by `N`, as `torch.nn.LayerNorm` uses), `eps` goes *inside* the square root (a
# constant row then gives `beta`, not `0 / 0`), and the variance is computed from distances to the mean,
# never as `E[x^2] - E[x]^2`: for a row around `1e4` with a spread of `1e-2`, `E[x^2]` is about `1e8`, and
# the difference of two such numbers keeps too few digits of a variance of `1e-4`, even in float64.
#
# **The conventions, all of them:**
# - `layer_norm(x, gamma, beta, eps)`: `x` is a **float32** array of shape `(..., N)` (any number of leading
#   axes, possibly with no rows at all, `N >= 1`); `gamma` and `beta` are float32 arrays of shape `(N,)`;
#   `eps` is a number `> 0` (`1e-5` by default);
# - over the last axis of every row: `mean = sum(x) / N`, `var = sum((x - mean)^2) / N` (biased: divide by
#   `N`, not `N - 1`), `y = (x - mean) / sqrt(var + eps) * gamma + beta`;
# - accumulate in **float64**: convert `x` first, compute the mean, then the variance from `x - mean` (two
#   passes), and round the result once at the end;
# - the result is a **float32** array of `x`'s shape;
# - edge cases: a constant row, and a row of one element (`N = 1`), have variance 0 and give `beta`; rows
#   around `1e4` with a spread of `1e-2` (variance `1e-4`, ten times `eps`) are graded, and so are rows whose
#   variance is at or below `eps`, where `eps`'s place decides the result;
# - results are compared with the same formula computed in float64, within a relative tolerance of 1e-5
#   and an absolute one of 1e-6.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/layernorm", globals())

# %% tags=["solution"]
def layer_norm(x, gamma, beta, eps=1e-5) -> np.ndarray:
    """LayerNorm of the float32 array x over its last axis: biased variance, eps inside the square root, float32."""
    ### BEGIN SOLUTION
    x64 = np.asarray(x, dtype=np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    centered = x64 - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)  # biased, from distances to the mean
    y = centered / np.sqrt(var + eps) * gamma + beta
    return y.astype(np.float32)
    ### END SOLUTION


# %% tags=["check"]
check("layer_norm_rows")
### BEGIN HIDDEN TESTS
check("layer_norm_rows", hidden=True)
### END HIDDEN TESTS
