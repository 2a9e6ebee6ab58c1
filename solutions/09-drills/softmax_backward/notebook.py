# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: softmax backward
#
# **You will learn** to write the backward pass of softmax, the vector-Jacobian product every attention layer and
# every classifier runs in training. The Jacobian of `s = softmax(x)` on a row is `diag(s) - s s^T`: raising one
# input raises its own probability and lowers every other, so the gradient has a row term besides the diagonal
# one. A check with an upstream gradient of all ones sees neither (the loss `sum(s)` is the constant 1): the
# checks here use random upstream gradients.
#
# **The conventions, all of them:**
# - `softmax_backward(x, dy)`: `x` is a **float64** array of any shape with at least one axis, the last of
#   `n >= 1` elements; softmax is taken over the **last axis**; `dy = dL/ds` is a float64 array of `x`'s shape
#   (any values, not only ones);
# - it returns `dx = dL/dx`, a **float64** array of `x`'s shape;
# - `x` may hold values of any size up to `1e4` in magnitude (logits around `1e3` included): no exp may
#   overflow, so recompute the softmax with each row's maximum subtracted;
# - edge cases: a row of one element has `s = 1` whatever `x` is, so `dx = 0`; a row whose `dy` is constant
#   gets `dx = 0`;
# - results are compared with the exact gradient computed in float64 (what `torch.autograd` gives) within a
#   relative tolerance of 1e-7 and an absolute one of 1e-9; NaN fails.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/softmax_backward", globals())

# %% tags=["solution"]
def softmax_backward(x, dy):
    """dL/dx of s = softmax(x) over the last axis, given dy = dL/ds: float64, x's shape."""
    ### BEGIN SOLUTION
    x, dy = np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # every exponent <= 0: no overflow
    s = e / e.sum(axis=-1, keepdims=True)
    return s * (dy - (dy * s).sum(axis=-1, keepdims=True))  # diag(s) dy - s (s . dy), row by row
    ### END SOLUTION


# %% tags=["check"]
check("gradients")
### BEGIN HIDDEN TESTS
check("gradients", hidden=True)
### END HIDDEN TESTS
