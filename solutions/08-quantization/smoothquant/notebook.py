# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: SmoothQuant: moving outliers from activations into weights
#
# **You will learn** to compute SmoothQuant's per-channel smoothing scales and fold them into a normalisation and
# the linear layers after it, so that a W8A8 (int8 weights, int8 activations) layer loses far less to
# quantization, while the float model stays exactly the same function (Xiao et al. 2023, "SmoothQuant: Accurate
# and Efficient Post-Training Quantization for Large Language Models", arXiv 2211.10438, section 4; the original
# code is `smooth_ln_fcs` in github.com/mit-han-lab/smoothquant, smoothquant/smooth.py). A few channels of an
# LLM's activations are up to ~100x larger than the rest; one int8 scale per token must then cover the outlier,
# and every ordinary channel of that token gets only a few codes. Weights have no such outliers. SmoothQuant
# divides each activation channel by a factor $s_j$ and multiplies the matching weight column by the same
# $s_j$: $XW^T = (X \operatorname{diag}(s)^{-1}) (W \operatorname{diag}(s))^T$.
#
# **The setting.** An activation `X` `(T, C)` leaves a normalisation with gain `gain` `(C,)` (and, for
# LayerNorm, a `bias` `(C,)`; RMSNorm has none: `bias is None`) and is read by one or more linear layers, each
# a weight `(out_i, C)` (PyTorch's `nn.Linear` layout, `y = X @ W.T`); attention's q, k and v projections all
# read the same `X`. `act_max` `(C,)` is `max |X[:, j]|` over calibration tokens.
#
# **The conventions, all of them:**
# - `smoothing_scales(act_max, weights, alpha=0.5)`: `weights` is a list of the `(out_i, C)` weights of **every**
#   layer that reads `X`. Per input channel `j`, `weight_max[j] = max |W_i[o, j]|` over every row `o` of every
#   layer `i` (the maximum of the concatenated weights, along the output axis: column `j` of each weight), then
#   clamped to at least `1e-5`. Then `s[j] = act_max[j] ** alpha / weight_max[j] ** (1 - alpha)`, clamped to at
#   least `1e-5`. `act_max` itself is not clamped (`0.0 ** 0 == 1.0`). Returns `s` as float64, shape `(C,)`.
#   These are the original's clamps: `weight_scales.clamp(min=1e-5)`, `scales.clamp(min=1e-5)`.
# - `smooth(gain, bias, weights, scales)` returns `(gain / scales, bias / scales, [W * scales for W in weights])`
#   (the bias entry `None` when `bias` is None), all float64: `X / s` is folded into the norm (the norm's output
#   is `normalised * gain + bias`, so dividing both divides its output), and `W * s` multiplies **column** `j`
#   of every weight by `s[j]`. Nothing new runs at inference time.
# - inputs are float64 arrays (`act_max >= 0`), `0 <= alpha <= 1`; results are float64. Scales and smoothed
#   values are compared with the reference to a relative 1e-9, the smoothed layer's outputs with the original's
#   to a relative 1e-9 (float64: the same function up to rounding).
# - the W8A8 layer the checks apply afterwards (given below, `w8a8_linear`): activations quantized per token
#   (one symmetric int8 scale per row), weights per output channel (one per row of `W`), both with
#   `aisys.quant.affine.fake_quantize`, as the original's `W8A8Linear(act_quant="per_token")`.
#
# When your work is graded, `aisys.quant.affine` can be imported; the reference answers cannot.

# %%
import numpy as np
from aisys.quant import affine

from aisys_grader import checker

check = checker("08-quantization/smoothquant", globals())


def norm(x, gain, bias=None, eps=1e-5):
    """LayerNorm over the last axis when `bias` is given, RMSNorm when it is None."""
    if bias is None:
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gain
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps) * gain + bias


def w8a8_linear(x, weight):
    """x @ weight.T with x fake-quantized to int8 per token and weight per output channel (symmetric)."""
    xq = affine.fake_quantize(x, bits=8, symmetric=True, granularity="token").astype(np.float64)
    wq = affine.fake_quantize(weight, bits=8, symmetric=True, granularity="channel").astype(np.float64)
    return xq @ wq.T


# A layer whose norm gain has two outlier channels, as LLMs' do.
rng = np.random.default_rng(0)
T, C = 64, 32
x_in = rng.standard_normal((T, C))
gain = np.ones(C)
gain[[3, 17]] = [40.0, -60.0]
bias = 0.1 * rng.standard_normal(C)
wq, wk, wv = (0.1 * rng.standard_normal((16, C)) for _ in range(3))
X = norm(x_in, gain, bias)
print("max |X| per channel:", np.abs(X).max(axis=0).round(1))

# %% [markdown]
# ## 1. The smoothing scales
#
# Write `smoothing_scales`. `alpha` is the *migration strength*: how much of the activations' range moves into
# the weights. With `alpha = 1`, `s = act_max` and every channel of `X / s` has maximum 1 (the weights carry
# everything); with `alpha = 0`, `s = 1 / weight_max` and every weight column's maximum becomes 1 (the
# activations carry everything). The paper's default, `alpha = 0.5`, makes the two maxima equal per channel:
# `act_max / s = weight_max * s = sqrt(act_max * weight_max)`.

# %% tags=["solution"]
def smoothing_scales(act_max, weights, alpha=0.5):
    """s[j] = act_max[j] ** alpha / weight_max[j] ** (1 - alpha), weight_max over every layer reading X."""
    ### BEGIN SOLUTION
    weight_max = np.max([np.abs(w).max(axis=0) for w in weights], axis=0)  # per input channel, every layer
    weight_max = np.maximum(weight_max, 1e-5)
    return np.maximum(np.asarray(act_max, dtype=np.float64) ** alpha / weight_max ** (1 - alpha), 1e-5)
    ### END SOLUTION


# %% tags=["check"]
check("scales")
### BEGIN HIDDEN TESTS
check("scales", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("alpha_edges")
### BEGIN HIDDEN TESTS
check("alpha_edges", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("shared_input")
### BEGIN HIDDEN TESTS
check("shared_input", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("zero_channel")
### BEGIN HIDDEN TESTS
check("zero_channel", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Folding the scales in
#
# Write `smooth`: divide the norm's gain (and bias) by `s`, multiply each weight's columns by `s`. The layer must
# compute exactly what it computed before: smoothing changes what quantization sees, not the function.

# %% tags=["solution"]
def smooth(gain, bias, weights, scales):
    """(gain / s, bias / s or None, [W * s per layer]): X / s folded into the norm, W * s per input column."""
    ### BEGIN SOLUTION
    scales = np.asarray(scales, dtype=np.float64)
    new_bias = None if bias is None else np.asarray(bias, dtype=np.float64) / scales
    return (np.asarray(gain, dtype=np.float64) / scales, new_bias,
            [np.asarray(w, dtype=np.float64) * scales for w in weights])
    ### END SOLUTION


# %% tags=["check"]
check("equivalent")
### BEGIN HIDDEN TESTS
check("equivalent", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. What it buys
#
# The same layer in W8A8, before and after smoothing (q, k and v share the scales). The check runs this on
# layers with outlier channels and expects the smoothed error to be lower.

# %%
def w8a8_error(x, weights):
    return float(np.mean([np.mean((w8a8_linear(x, w) - x @ w.T) ** 2) for w in weights]))


try:
    s = smoothing_scales(np.abs(X).max(axis=0), [wq, wk, wv], alpha=0.5)
    new_gain, new_bias, smoothed = smooth(gain, bias, [wq, wk, wv], s)
    X_smooth = norm(x_in, new_gain, new_bias)
    print("W8A8 mean squared error, unsmoothed:", w8a8_error(X, [wq, wk, wv]))
    print("W8A8 mean squared error, smoothed:  ", w8a8_error(X_smooth, smoothed))
except NotImplementedError:
    print("write smoothing_scales and smooth first")

# %% tags=["check"]
check("w8a8_error")
### BEGIN HIDDEN TESTS
check("w8a8_error", hidden=True)
### END HIDDEN TESTS
