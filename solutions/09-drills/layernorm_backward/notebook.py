# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: LayerNorm backward
#
# **You will learn** to derive and write the gradients of LayerNorm (Ba, Kiros & Hinton 2016) by hand, the
# backward pass a fused LayerNorm kernel computes. `dgamma` and `dbeta` are sums over the rows; the subtle
# part is `dx`: every element of a row moves the row's mean and its variance, and through them every other
# element's output, so `dx` has two correction terms besides the direct one, the path through the mean and
# the path through the variance. Write `xhat = (x - mean) * rstd` with `rstd = 1 / sqrt(var + eps)`, and
# follow the chain rule through both.
#
# **The conventions, all of them:**
# - the forward pass is `y = (x - mean) / sqrt(var + eps) * gamma + beta` over each row of `x`, with
#   `mean = sum(x) / N` and the *biased* variance `var = sum((x - mean)^2) / N`, eps inside the square root
#   (as `torch.nn.LayerNorm`); `beta` does not change any gradient, so it is not an argument;
# - `layer_norm_backward(x, gamma, dy, eps)`: `x` is a **float64** array of shape `(M, N)` (`M >= 0` rows,
#   `N >= 1` columns), `gamma` float64 of shape `(N,)`, `dy = dL/dy` float64 of shape `(M, N)` (any
#   upstream gradient, not only ones), `eps` a number `> 0`;
# - it returns the tuple `(dx, dgamma, dbeta)` of float64 arrays of shapes `(M, N)`, `(N,)` and `(N,)`:
#   `dgamma` and `dbeta` are **summed over the rows** (with no rows, they are zeros);
# - edge cases: a row of one element (`N = 1`) or a constant row has `xhat = 0`; for `N = 1` the output does
#   not depend on `x` at all, so `dx = 0`;
# - results are compared with the exact gradients computed in float64 (the same as `torch.autograd` gives),
#   within a relative tolerance of 1e-7 and an absolute one of 1e-8.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/layernorm_backward", globals())

# %% tags=["solution"]
def layer_norm_backward(x, gamma, dy, eps=1e-5):
    """(dx, dgamma, dbeta) of LayerNorm over the rows of x (M, N), given dy = dL/dy: float64 arrays."""
    ### BEGIN SOLUTION
    x, gamma, dy = (np.asarray(a, dtype=np.float64) for a in (x, gamma, dy))
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma  # the gradient reaching xhat
    dx = rstd * (g - g.mean(axis=1, keepdims=True)  # through the mean
                 - xhat * (g * xhat).mean(axis=1, keepdims=True))  # through the variance
    dgamma = (dy * xhat).sum(axis=0)
    dbeta = dy.sum(axis=0)
    return dx, dgamma, dbeta
    ### END SOLUTION


# %% tags=["check"]
check("gradients")
### BEGIN HIDDEN TESTS
check("gradients", hidden=True)
### END HIDDEN TESTS
