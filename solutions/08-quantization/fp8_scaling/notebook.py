# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: FP8 scaling: delayed per-tensor and per-block
#
# **You will learn** to cast tensors to FP8 without overflow: E4M3 holds magnitudes up to 448 and E5M2 up to 57344
# (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", arXiv 2209.05433, table 1), so every tensor is
# multiplied by a scale first. You will write the two ways training recipes choose it: per tensor from a history of
# past maxima (Transformer Engine's delayed scaling) and per block from the block's own maximum (DeepSeek-V3's
# fine-grained quantization, arXiv 2412.19437, section 3.3.2).
#
# **The conventions, all of them** (they are `aisys.quant.fp8`'s, which the checks compare with, bit for bit):
# - **Formats.** `"e4m3"` is `torch.float8_e4m3fn` (4 exponent bits, bias 7, 3 mantissa bits; largest value 448; no
#   infinity; the one NaN pattern per sign is `S.1111.111`). `"e5m2"` is `torch.float8_e5m2` (bias 15; largest
#   57344; has infinities). Codes are the **uint8 bit patterns** (`tensor.view(torch.uint8)`), compared exactly
#   (so -0.0, pattern `0x80`, is not 0.0). Encoding rounds to nearest, ties to even. You may use torch's casts on the
#   CPU (`torch.from_numpy(a).to(torch.float8_e4m3fn).view(torch.uint8).numpy()`); `torch` is importable.
# - **Saturation.** Clip to `[-max, max]` **before** the cast, as Transformer Engine does: nothing may become
#   infinity or NaN. (On this torch, 2.13, the CPU cast to `float8_e4m3fn` happens to saturate by itself, infinity
#   included, but the cast to `float8_e5m2` does not: 61440 becomes `inf`. Older versions are reported to give NaN
#   for E4M3. Rely on neither.) In E4M3 a value from 448 to 464 rounds to 448 (464 is a tie, and 448's mantissa is
#   even); one above 464 would round to 480, whose pattern `S.1111.111` is the NaN: saturation gives 448 for both.
# - **The scale multiplies**: `codes = encode(saturate(x * scale))`, and `x ≈ decode(codes) / scale`. `x` and
#   `scale` are float32; round the product `x * scale` to float32 first (compute it in float32), then saturate, then
#   cast.
# - **`scale = fp8_max / amax / 2**margin`**, rounded to float32 (`amax` = the largest magnitude). Where `amax` is 0
#   the scale stays what it was (1 if there was none): Transformer Engine's `_default_sf_compute`.
# - **`to_fp8_bits(x, fmt)`**: the uint8 codes of float32 `x` (any shape), saturated, with no scale.
# - **`delayed_scaling(xs, fmt="e4m3", window=16, margin=0)`**: `xs` is float32 of shape `(steps, ...)`, one tensor
#   per training step. At step `t`:
#   1. cast `xs[t]` with the **current scale**, the one computed after step `t-1` (at the first step, with an empty
#      history, the scale is 1);
#   2. **then** append `amax_t = max|xs[t]|` to the history and keep its last `window` entries;
#   3. set the scale for step `t+1` from `amax = max(history)` (the rule above).
#
#   Return `(codes, scales)`: `codes` uint8 of `xs`'s shape, `scales` float32 of shape `(steps,)`, the scale each
#   step's cast used. A spike at step `t` so lowers the scales of steps `t+1 .. t+window`: exactly `window` steps.
# - **`quantize_blockwise(x, block, fmt="e4m3")`**: `x` float32 2-d of shape `(R, C)`, `block = (br, bc)` with
#   `br` rows and `bc` columns; one scale per block from that block's own `amax` (no history; 1 for an all-zero
#   block). Return `(codes, scales)`: `codes` uint8 of `x`'s shape, `scales` float32 of shape `(R // br, C // bc)`,
#   `scales[i, j]` covering `x[i*br:(i+1)*br, j*bc:(j+1)*bc]`. DeepSeek-V3 uses `(1, 128)` for activations (a token's
#   128 channels) and `(128, 128)` for weights. If `br` does not divide `R` or `bc` does not divide `C`, raise
#   `ValueError` with a message naming `block` and the shape.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np
import torch

from aisys_grader import checker

check = checker("08-quantization/fp8_scaling", globals())

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def from_fp8_bits(codes, fmt):
    """float32 values of uint8 FP8 bit patterns (provided, for trying things)."""
    return torch.from_numpy(np.ascontiguousarray(codes)).view(FORMATS[fmt]).float().numpy()


# %% [markdown]
# ## 1. Encoding, saturated

# %% tags=["solution"]
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def to_fp8_bits(x, fmt):
    """uint8 codes of float32 x: clipped to [-max, max], then rounded to nearest even."""
    ### BEGIN SOLUTION
    x = np.clip(np.asarray(x, dtype=np.float32), -FP8_MAX[fmt], FP8_MAX[fmt])
    return torch.from_numpy(np.ascontiguousarray(x)).to(FORMATS[fmt]).view(torch.uint8).numpy()
    ### END SOLUTION


# %% tags=["check"]
check("to_fp8_bits")
### BEGIN HIDDEN TESTS
check("to_fp8_bits", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Delayed per-tensor scaling

# %% tags=["solution"]
def scale_for(amax, fmt, margin=0, previous=1.0):
    """fp8_max / amax / 2**margin as float32; `previous` where amax is 0."""
    ### BEGIN SOLUTION
    if not amax > 0:
        return np.float32(previous)
    return np.float32(FP8_MAX[fmt] / float(amax) / 2.0 ** margin)
    ### END SOLUTION


def delayed_scaling(xs, fmt="e4m3", window=16, margin=0):
    """(codes uint8 of xs's shape, float32 scale each step used): cast with the scale from past steps, then record."""
    ### BEGIN SOLUTION
    xs = np.asarray(xs, dtype=np.float32)
    history, scale = [], np.float32(1.0)
    codes, scales = [], []
    for x in xs:
        codes.append(to_fp8_bits(x * scale, fmt))  # the scale from earlier steps
        scales.append(scale)
        history = (history + [float(np.abs(x).max())])[-window:]  # recorded after the cast
        scale = scale_for(max(history), fmt, margin, previous=scale)
    return np.stack(codes), np.array(scales, dtype=np.float32)
    ### END SOLUTION


# %% tags=["check"]
check("delayed_scaling")
### BEGIN HIDDEN TESTS
check("delayed_scaling", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Per-block scaling

# %% tags=["solution"]
def quantize_blockwise(x, block, fmt="e4m3"):
    """(codes uint8 of x's shape, float32 scales of shape (R // br, C // bc)), one scale per block."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    br, bc = block
    if x.shape[0] % br or x.shape[1] % bc:
        raise ValueError(f"block {(br, bc)} must divide the shape of x, {x.shape}")
    amax = np.abs(x).reshape(x.shape[0] // br, br, x.shape[1] // bc, bc).max(axis=(1, 3))
    scales = np.array([[scale_for(a, fmt) for a in row] for row in amax], dtype=np.float32)
    full = np.repeat(np.repeat(scales, br, axis=0), bc, axis=1)
    return to_fp8_bits(x * full, fmt), scales
    ### END SOLUTION


# %% tags=["check"]
check("quantize_blockwise")
### BEGIN HIDDEN TESTS
check("quantize_blockwise", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The checks read what `quantize_blockwise` raises through this provided helper: the error's type and message, or
# `None` when it returns.

# %%
def refusal(**arguments):
    """[type name, message] of what quantize_blockwise(**arguments) raises, or None if it returns."""
    try:
        quantize_blockwise(**arguments)
    except NotImplementedError:
        raise
    except Exception as error:  # any error is reported, and judged by the check
        return [type(error).__name__, str(error)]
    return None


# %% tags=["check"]
check("block_refused")
### BEGIN HIDDEN TESTS
check("block_refused", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Try it: a spike in the history
#
# Activations of magnitude about 1, with one step 100 times larger: delayed scaling saturates that step (its scale
# came from the quiet past), then keeps the scale low for `window` steps.

# %%
steps = np.random.default_rng(0).standard_normal((12, 64)).astype(np.float32)
steps[4] *= 100
codes, scales = delayed_scaling(steps, window=4)
for t, (c, s) in enumerate(zip(codes, scales)):
    error = np.abs(from_fp8_bits(c, "e4m3") / s - steps[t]).max() / np.abs(steps[t]).max()
    print(f"step {t:2d}  amax {np.abs(steps[t]).max():8.2f}  scale {s:8.3f}  largest error / amax {error:.3f}")
