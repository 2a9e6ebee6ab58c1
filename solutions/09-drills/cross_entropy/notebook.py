# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: cross-entropy from logits, with ignored targets
#
# **You will learn** to compute the loss every language model trains on, as `torch.nn.functional.cross_entropy`
# defines it: from raw logits, without ever forming `log(softmax(x))`. `log softmax(x)_t = x_t - logsumexp(x)`,
# and `logsumexp(x) = m + log(sum(exp(x - m)))` with `m = max(x)` never overflows, and it gives a target far
# below the maximum its true, large loss, where `log(softmax(x))` takes the log of a probability that
# underflowed to 0. Targets equal to `ignore_index` (padding, prompt tokens) are left out of the loss *and*
# of the count it is averaged over.
#
# **The conventions, all of them:**
# - `cross_entropy(logits, targets, ignore_index=-100)`: `logits` is a **float32** array of shape `(N, C)`
#   (`N >= 0` rows, `C >= 1` classes) of finite values of any size (up to `1e4` and beyond); `targets` an
#   **int64** array of shape `(N,)` whose entries are class indices in `[0, C)` or equal to `ignore_index`;
#   `ignore_index` any integer (`-100` by default, as torch's; it may also be a valid class such as `0`, and
#   then rows of that class are left out);
# - it returns a Python `float`: the mean of `logsumexp(logits[i]) - logits[i, targets[i]]` over the rows
#   whose target is **not** `ignore_index` (the sum divided by the number of such rows, not by `N`);
# - when every row is ignored, or there are no rows, it returns **`float("nan")`**, as torch does (0 / 0);
# - compute in **float64** (convert the logits first): float32 numbers near `1e4` are about `1e-3` apart,
#   so a loss computed from logits around `1e4` in float32 is off by about that much;
# - results are compared with the same mean computed in float64 within a relative and an absolute tolerance
#   of 1e-7; NaN must be NaN.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/cross_entropy", globals())

# %% tags=["solution"]
def cross_entropy(logits, targets, ignore_index=-100) -> float:
    """Mean cross-entropy of logits (N, C) against targets (N,), rows whose target is ignore_index left out."""
    ### BEGIN SOLUTION
    logits, targets = np.asarray(logits, dtype=np.float64), np.asarray(targets)
    kept = targets != ignore_index
    if not kept.any():
        return float("nan")  # no row to average over, as torch gives
    z, t = logits[kept], targets[kept]
    m = z.max(axis=1)
    logsumexp = m + np.log(np.exp(z - m[:, None]).sum(axis=1))  # every exponent <= 0
    losses = logsumexp - z[np.arange(len(z)), t]
    return float(losses.sum() / kept.sum())
    ### END SOLUTION


# %% tags=["check"]
check("stable_loss")
### BEGIN HIDDEN TESTS
check("stable_loss", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ignored_rows")
### BEGIN HIDDEN TESTS
check("ignored_rows", hidden=True)
### END HIDDEN TESTS
