# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a numerically stable softmax
#
# **You will learn** to write the softmax every attention layer and every classifier ends in, so that no
# input overflows or underflows it: `exp(x)` overflows float32 above about 88.7 and is 0 below about
# -103, so `exp(x) / sum(exp(x))` gives `inf / inf` or `0 / 0`, NaN either way. Since
# `softmax(x) = softmax(x - c)` for any constant `c`, subtracting each row's maximum first makes every
# exponent `<= 0` and the largest term exactly 1 (Goodfellow, Bengio & Courville, *Deep Learning*, 2016,
# section 4.1).
#
# **The conventions, all of them:**
# - `softmax(x)` takes a float32 array `x` of any shape with at least one axis, and works along its
#   **last** axis: every slice `x[..., :]` (a "row") becomes `exp(x - max) / sum(exp(x - max))`;
# - the result is a **float32** array of `x`'s shape; computing in float32 is fine, and so is float64
#   rounded to float32 at the end;
# - the last axis has at least one element; there may be no rows at all (shape `(0, 5)`: return an
#   empty float32 array of that shape);
# - entries are finite numbers of any size (up to float32's largest, about 3.4e38, of either sign) or
#   `-inf`; an `-inf` entry gets probability exactly 0. Every row holds at least one finite entry, and
#   no entry is NaN or `+inf`;
# - results are compared with the softmax computed in float64 from the same float32 values, within a
#   relative tolerance of 1e-5 and an absolute tolerance of 1e-8 (so probabilities below about 1e-8
#   only need to be tiny).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/softmax", globals())

# %% tags=["solution"]
def softmax(x) -> np.ndarray:
    """Softmax of the float32 array x along its last axis: a float32 array of x's shape."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):  # -3e38 - 3e38 is -inf, whose exp is the right 0
        shifted = x - x.max(axis=-1, keepdims=True)  # every exponent <= 0: nothing overflows
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)  # the sum is >= 1 (the maximum's term is exp(0))
    ### END SOLUTION


# %% tags=["check"]
check("softmax_rows")
### BEGIN HIDDEN TESTS
check("softmax_rows", hidden=True)
### END HIDDEN TESTS
