# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: LayerNorm with a Newton square root
#
# **You will learn** to compute a square root with nothing but `+ - * /`, by Newton's method on
# `f(y) = y^2 - x`, whose step `y - f(y) / f'(y)` is `y <- (y + x / y) / 2` (Heron's method), and to build
# LayerNorm on it. Hardware without a square root unit, and interview questions that forbid `np.sqrt`, come
# down to this; each step roughly doubles the correct digits once `y` is close, while from far away each step
# only halves the distance. The check compares your values after exactly `k` steps from the stated start,
# which differ from the true square root for small `k`: that is how it sees Newton's method was used.
#
# **The conventions, all of them:**
# - `sqrt_newton(x, iterations)`: `x` is a float64 array of any shape whose entries are all `> 0`;
#   `iterations` an integer `>= 0`. Start from **`y0 = (1 + x) / 2`** (the first Newton step from `y = 1`;
#   it is `>= sqrt(x)`, and every step after stays above `sqrt(x)` and comes closer), then apply
#   `y <- (y + x / y) / 2` exactly `iterations` times, elementwise; `iterations = 0` returns `y0`. Return a
#   float64 array of `x`'s shape. No `np.sqrt`, `math.sqrt`, `** 0.5` or `np.power`;
# - `layer_norm_newton(x, gamma, beta, eps, iterations)`: `x` is a float64 array of shape `(..., N)` (any
#   leading axes, possibly no rows, `N >= 1`); `gamma` and `beta` float64 of shape `(N,)`; `eps > 0`. Over the
#   last axis: `mean = sum(x) / N`, the *biased* variance `var = sum((x - mean)^2) / N` (from distances to the
#   mean, two passes), then `y = (x - mean) * (1 / sqrt_newton(var + eps, iterations)) * gamma + beta`: eps
#   inside the square root, as in LayerNorm. Sums and `np.sum` / `np.mean` are allowed (they are additions and
#   a division); no square root function. Return float64 of `x`'s shape;
# - edge cases: `iterations = 0`; `x = 1` (a fixed point: every step gives 1); very small and very large `x`
#   (many steps from the start); constant rows and rows of one element (`var = 0`, so the square root is taken
#   of `eps` alone);
# - `sqrt_newton` is compared with exactly those steps in float64 within a relative tolerance of 1e-12, and
#   `layer_norm_newton` within a relative tolerance of 1e-10 and an absolute one of 1e-12.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/layernorm_newton", globals())

# %% tags=["solution"]
def sqrt_newton(x, iterations: int) -> np.ndarray:
    """sqrt(x) elementwise by `iterations` Newton steps y <- (y + x / y) / 2 from y0 = (1 + x) / 2, in float64."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    y = (1 + x) / 2  # the stated start: one Newton step from y = 1
    for _ in range(iterations):
        y = (y + x / y) / 2
    return y
    ### END SOLUTION


def layer_norm_newton(x, gamma, beta, eps: float, iterations: int) -> np.ndarray:
    """LayerNorm over the last axis with 1 / sqrt_newton(var + eps, iterations) for 1 / sqrt(var + eps)."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / n
    centered = x - mean
    var = (centered * centered).sum(axis=-1, keepdims=True) / n
    rstd = 1 / sqrt_newton(var + eps, iterations)
    return centered * rstd * gamma + beta
    ### END SOLUTION


# %% tags=["check"]
check("newton_sqrt")
### BEGIN HIDDEN TESTS
check("newton_sqrt", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("layer_norm_rows")
### BEGIN HIDDEN TESTS
check("layer_norm_rows", hidden=True)
### END HIDDEN TESTS
