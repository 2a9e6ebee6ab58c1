# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: int8 quantization
#
# **You will learn** to quantize a tensor to int8 and back with an affine map, per tensor or per channel,
# symmetric or asymmetric: the arithmetic under int8 weights and activations (Jacob et al. 2018, "Quantization
# and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", section 2.1;
# `torch.quantize_per_tensor`). Every rounding and every range below is stated, because that is where
# quantization code goes wrong.
#
# **The conventions, all of them:**
# - `quantize(x, scale, zero_point, symmetric=False)` returns the int8 codes
#   `clamp(round(x / scale) + zero_point, low, 127)`, with `low = -128`, or `low = -127` when `symmetric`
#   (a symmetric range mirrors around 0, so -128 is left out). `x` is a float64 array of any shape (it
#   may be empty); `scale` a float32 array or a float, `zero_point` an int32 array or an int, either of a
#   shape that broadcasts against `x` (as `choose_params` gives them). Compute `x / scale` in float64 (divide;
#   do not multiply by `1 / scale`, which rounds differently) and round **half to even** (`np.round`: 2.5 -> 2,
#   -0.5 -> 0, 1.5 -> 2), then add the zero point, then clamp;
# - `dequantize(q, scale, zero_point)` returns `(q - zero_point) * scale` as float32, from int8 codes `q`
#   (subtract in integers wider than int8: `127 - (-128)` is 255);
# - `choose_params(x, mode="symmetric", axis=None)` returns `(scale, zero_point)`: `scale` float32,
#   `zero_point` int32, both of the shape of `x.max(axis=reduced, keepdims=True)`, where `reduced` is every
#   axis when `axis is None` (per tensor: shape `(1, 1, ...)`) and every axis but `axis` otherwise (per
#   channel: one pair per index along `axis`, which may be negative). `x` is float64, not empty. Over the
#   reduced axes:
#   - `mode="symmetric"`: `scale = max|x| / 127`, `zero_point = 0`;
#   - `mode="asymmetric"`: the range is `[lo, hi]` with `lo = min(x.min(), 0)` and `hi = max(x.max(), 0)`
#     (it **always holds 0**, so that 0, padding's value, has an exact code), `scale = (hi - lo) / 255`,
#     `zero_point = -128 - round(lo / scale)`, rounded half to even, using the float64 scale;
#   - where that scale is 0 (the values are all 0), `scale = 1` (and the zero point follows from the same
#     formula: 0 symmetric, -128 asymmetric);
#   - compute in float64, exactly these expressions (an equal one such as `lo * 255 / (hi - lo)` can round a
#     zero point that sits at a half the other way), and round the scale to float32 last;
# - codes and zero points are compared exactly, scales and dequantized values with a relative tolerance of
#   1e-6.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/quantize", globals())

# %% tags=["solution"]
def quantize(x, scale, zero_point, symmetric=False):
    """int8 codes clamp(round_half_even(x / scale) + zero_point, -128 (or -127 if symmetric), 127)."""
    ### BEGIN SOLUTION
    low = -127 if symmetric else -128
    codes = np.round(np.asarray(x, dtype=np.float64) / np.asarray(scale, dtype=np.float64)) + zero_point
    return np.clip(codes, low, 127).astype(np.int8)
    ### END SOLUTION


def dequantize(q, scale, zero_point):
    """(q - zero_point) * scale, float32."""
    ### BEGIN SOLUTION
    return ((np.asarray(q).astype(np.int32) - zero_point) * np.asarray(scale, dtype=np.float64)).astype(np.float32)
    ### END SOLUTION


def choose_params(x, mode="symmetric", axis=None):
    """(scale float32, zero_point int32) per tensor (axis None) or per index along axis, shaped to broadcast."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    reduced = tuple(i for i in range(x.ndim) if axis is None or i != axis % x.ndim)
    if mode == "symmetric":
        scale = np.abs(x).max(axis=reduced, keepdims=True) / 127
    else:
        low = np.minimum(x.min(axis=reduced, keepdims=True), 0.0)  # the range holds 0
        high = np.maximum(x.max(axis=reduced, keepdims=True), 0.0)
        scale = (high - low) / 255
    scale = np.where(scale == 0, 1.0, scale)  # all zeros: scale 1
    zero_point = np.zeros_like(scale) if mode == "symmetric" else -128 - np.round(low / scale)
    return scale.astype(np.float32), zero_point.astype(np.int32)
    ### END SOLUTION


# %% tags=["check"]
check("quantize")
### BEGIN HIDDEN TESTS
check("quantize", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("dequantize")
### BEGIN HIDDEN TESTS
check("dequantize", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("choose_params")
### BEGIN HIDDEN TESTS
check("choose_params", hidden=True)
### END HIDDEN TESTS
