# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: AWQ: activation-aware weight scaling
#
# **You will learn** to quantize a layer's weights to 4 bits the way AWQ does: find the input channels whose
# *activations* are large (the salient ones), scale their weight columns up before quantizing so that they lose
# less, and pick how strongly to scale by a small grid search on the layer's output error. No gradient, no
# retraining: a few quantizations and matmuls per layer (Lin et al. 2023, "AWQ: Activation-aware Weight
# Quantization for LLM Compression and Acceleration", arXiv 2306.00978, section 3; the original code is
# `_search_module_scale` in github.com/mit-han-lab/llm-awq, awq/quantize/auto_scale.py). Why it works: in
# $Q(w \cdot s) \cdot x / s$ the rounding error of $w \cdot s$ is about the same as that of $w$ (the group's
# scale barely moves when one column grows), so dividing by $s$ shrinks the error that channel's activation
# multiplies.
#
# **The conventions, all of them:**
# - a layer's `weight` is `(out, C)` (PyTorch's `nn.Linear` layout) and its calibration inputs `x` are
#   `(tokens, C)`; its output is `x @ weight.T`. Both float64.
# - `x_mean[j] = mean |x[:, j]|` over every token: the **activation's** magnitude per input channel (llm-awq's
#   `get_act_scale`).
# - the grid: `n_grid` ratios `r = i / n_grid` for `i = 0, 1, ..., n_grid - 1` (`n_grid = 20`: 0, 0.05, ..., 0.95;
#   1 is not in it). For each, `s = x_mean ** r`, then `s = max(s, 1e-4)` elementwise, then
#   `s = s / sqrt(s.max() * s.min())` (the scales straddle 1; this normalisation is llm-awq's). At `r = 0` every
#   `s` is 1 (`0.0 ** 0 == 1.0`), so that grid point is plain round-to-nearest (RTN).
# - the quantized weight at scales `s` is `quantize_group(weight * s, bits, group_size) / s` (float64), with the
#   given `quantize_group`: `aisys.quant.affine`'s asymmetric fake quantization, one (scale, zero point) per
#   `group_size` consecutive input channels of a row, codes `-2**(bits-1) .. 2**(bits-1) - 1`. Multiply before
#   quantizing, divide after: `x / s` would be folded into the layer before this one, so the layer computes
#   `(x / s) @ Q(weight * s).T`.
# - the error of a ratio is the mean squared difference of the **outputs**, `mean((x @ weight.T - x @ w_q.T) ** 2)`
#   (not of the weights). The smallest error wins; on a tie, the first (the smallest ratio).
# - `search_scale(weight, x, bits=4, group_size=128, n_grid=20)` returns `(ratio, scales, errors)`: the chosen `r`
#   (a float), its scales (float64, `(C,)`) and the errors of every grid point (float64, `(n_grid,)`, in grid
#   order). `awq_quantize(weight, x, bits=4, group_size=128)` returns the quantized weight at the chosen scales as
#   float32.
# - compared with the reference: the ratio exactly, scales and errors to a relative 1e-9 (float64 in another
#   order), the quantized weight to a relative 1e-6 (float32).
#
# When your work is graded, `aisys.quant.affine` can be imported; the reference answers cannot.

# %%
import numpy as np
from aisys.quant import affine

from aisys_grader import checker

check = checker("08-quantization/awq", globals())


def quantize_group(w, bits=4, group_size=128):
    """Round-to-nearest: asymmetric fake quantization, one (scale, zero point) per group of input channels."""
    return affine.fake_quantize(w, bits=bits, symmetric=False, granularity="group",
                                group_size=group_size).astype(np.float64)


def output_error(x, weight, w_q):
    """Mean squared difference of the layer's outputs with the float and the quantized weight."""
    return float(np.mean((x @ weight.T - x @ w_q.T) ** 2))


# A layer whose inputs have two salient channels (mean |x| 20x the rest). Group size 32 keeps it small.
rng = np.random.default_rng(0)
weight = 0.05 * rng.standard_normal((16, 64))
x = rng.standard_normal((64, 64))
x[:, [5, 40]] *= 20.0
print("RTN output error:", output_error(x, weight, quantize_group(weight, group_size=32)))

# %% [markdown]
# ## 1. The scale search
#
# Write `search_scale`: for each ratio of the grid, the scales, the quantized weight and its output error; keep the
# best.

# %% tags=["solution"]
def search_scale(weight, x, bits=4, group_size=128, n_grid=20):
    """(ratio, scales, errors): AWQ's grid search over s = x_mean ** r, least output error, first on ties."""
    ### BEGIN SOLUTION
    x_mean = np.abs(x).mean(axis=0)  # the activation's magnitude per input channel
    errors, candidates = [], []
    for i in range(n_grid):
        s = np.maximum(x_mean ** (i / n_grid), 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        w_q = quantize_group(weight * s, bits, group_size) / s
        errors.append(output_error(x, weight, w_q))
        candidates.append(s)
    best = int(np.argmin(errors))  # the first of equal minima
    return best / n_grid, candidates[best], np.array(errors)
    ### END SOLUTION


# %% tags=["check"]
check("search")
### BEGIN HIDDEN TESTS
check("search", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("never_worse_than_rtn")
### BEGIN HIDDEN TESTS
check("never_worse_than_rtn", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("salient_channels")
### BEGIN HIDDEN TESTS
check("salient_channels", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("dead_channel")
### BEGIN HIDDEN TESTS
check("dead_channel", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The quantized weight
#
# Write `awq_quantize`: the weight the layer ends up with, `quantize_group(weight * s) / s` at the searched scales,
# as float32.

# %% tags=["solution"]
def awq_quantize(weight, x, bits=4, group_size=128):
    """The AWQ-quantized weight, Q(weight * s) / s at the searched s, float32."""
    ### BEGIN SOLUTION
    _, s, _ = search_scale(weight, x, bits, group_size)
    return (quantize_group(weight * s, bits, group_size) / s).astype(np.float32)
    ### END SOLUTION


# %%
try:
    ratio, s, errors = search_scale(weight, x, group_size=32)
    print("chosen ratio:", ratio, " scales of the salient channels:", s[[5, 40]].round(2))
    print("output error, AWQ:", output_error(x, weight, awq_quantize(weight, x, group_size=32)))
except NotImplementedError:
    print("write search_scale and awq_quantize first")

# %% tags=["check"]
check("quantized_weight")
### BEGIN HIDDEN TESTS
check("quantized_weight", hidden=True)
### END HIDDEN TESTS
