# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: cross-entropy backward, with ignored targets
#
# **You will learn** to write the gradient of the loss every language model trains on,
# `torch.nn.functional.cross_entropy` from logits with `ignore_index`, straight from the loss to the logits:
# softmax and log fused, the gradient of a kept row is `softmax(logits) - onehot(target)`, divided by the number
# of kept rows. Going through the probabilities instead (`-1 / p_target`, then softmax's Jacobian) gives NaN as
# soon as a target's probability underflows to 0; the fused form never does.
#
# **The conventions, all of them:**
# - `cross_entropy_backward(logits, targets, dloss, ignore_index=-100)`: `logits` is a **float64** array of
#   shape `(N, C)` (`N >= 1` rows, `C >= 1` classes) of finite values of any size (spreads of `1e3` and more);
#   `targets` an **int64** array of shape `(N,)`, each a class index in `[0, C)` or equal to `ignore_index`;
#   `ignore_index` any integer (it may be a valid class, such as `0`: rows of that class are then ignored);
#   `dloss = dL/dloss` a Python float (the upstream gradient of the scalar loss, any sign);
# - the loss is the **mean over the kept rows** (those whose target is not `ignore_index`) of
#   `logsumexp(logits[i]) - logits[i, targets[i]]`, as torch's `reduction="mean"` without class weights;
# - it returns `dlogits`, a **float64** array of shape `(N, C)`: for a kept row
#   `dloss * (softmax(logits[i]) - onehot(targets[i])) / kept`, with `kept` the number of kept rows; an ignored
#   row gets **0**;
# - **every row ignored**: the loss is NaN (0 / 0, as in torch) but no logit reaches it: return **all zeros**
#   (what `torch.autograd` gives), never NaN;
# - results are compared with the exact gradient computed in float64 within a relative tolerance of 1e-7 and an
#   absolute one of 1e-9; NaN fails.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/cross_entropy_backward", globals())

# %% tags=["solution"]
def cross_entropy_backward(logits, targets, dloss, ignore_index=-100):
    """dL/dlogits (N, C) of L = dloss * mean cross-entropy over the rows whose target is not ignore_index."""
    ### BEGIN SOLUTION
    logits, targets = np.asarray(logits, dtype=np.float64), np.asarray(targets)
    kept = targets != ignore_index
    e = np.exp(logits - logits.max(axis=1, keepdims=True))  # every exponent <= 0: no overflow
    grad = e / e.sum(axis=1, keepdims=True)
    rows = np.flatnonzero(kept)
    grad[rows, targets[rows]] -= 1  # softmax - onehot: log and softmax fused
    grad[~kept] = 0
    return grad * (dloss / max(len(rows), 1))  # the mean over kept rows; none kept: all zeros
    ### END SOLUTION


# %% tags=["check"]
check("gradients")
### BEGIN HIDDEN TESTS
check("gradients", hidden=True)
### END HIDDEN TESTS
