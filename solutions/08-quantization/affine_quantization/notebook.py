# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: affine quantization at every granularity
#
# **You will learn** to quantize an array to integer codes `q` with `x ≈ (q - zero_point) * scale`, symmetric or
# asymmetric, at 8 bits or fewer, with one `(scale, zero_point)` per tensor, per output channel, per token or per
# group of consecutive elements: the map under every int8 and int4 kernel (Jacob et al. 2018, arXiv 1712.05877,
# section 2.1; Nagel et al. 2021, arXiv 2106.08295, sections 2.2 and 2.3). Libraries differ on every rounding and
# range below, and those differences are where quantization code goes wrong, so all of them are stated.
#
# **The conventions, all of them** (they are `aisys.quant.affine`'s, which the checks compare with bit for bit):
# - **Codes** are signed integers held in an `int8` array, also for `bits` < 8. With `qmax = 2**(bits-1) - 1`:
#   symmetric codes lie in `[-qmax, qmax]` (-127..127 for 8 bits, -7..7 for 4: the most negative code
#   `-2**(bits-1)` is **never** used, so the range mirrors around 0); asymmetric codes lie in `[-qmax - 1, qmax]`
#   (-128..127, -8..7). `bits` is an int in [2, 8].
# - **Granularity is a block shape.** One `(scale, zero_point)` covers a block; for `x` of shape `S`:
#   - `"tensor"`: the block is `S` (one pair);
#   - `"channel"`: the block is `(1, *S[1:])`: one pair per index of axis 0 (a weight's output channel);
#   - `"token"`: the block is `(1, ..., 1, S[-1])`: one pair per row of the last axis;
#   - `"group"`: the block is `(1, ..., 1, group_size)`: one pair per `group_size` consecutive elements of the last
#     axis. If `group_size` does not divide `S[-1]`, raise `ValueError` with a message naming `group_size` (and
#     what it must divide). `group_size` is only given with `"group"`.
#
#   `scale` and `zero_point` have the shape `S[i] // block[i]` per axis (same number of dimensions as `x`), and the
#   pair at index `(i0, i1, ...)` covers `x[i0*b0:(i0+1)*b0, i1*b1:(i1+1)*b1, ...]`. So per channel of a `(4, 6)`
#   weight the parameters have shape `(4, 1)`, per group of 3 they have shape `(4, 2)`.
# - **`choose_qparams(x, bits=8, symmetric=True, granularity="tensor", group_size=None)`** returns
#   `(scale, zero_point)`: `scale` **float32**, `zero_point` **int32**. `x` is a float array (float32 or float64, at
#   least one dimension, not empty). Compute in float64, per block:
#   - symmetric: `scale = max|x| / qmax`, `zero_point = 0`;
#   - asymmetric: `lo = min(x.min(), 0)`, `hi = max(x.max(), 0)` (the range always holds 0, so that 0 has an exact
#     code), `scale = (hi - lo) / (qmax - qmin)`;
#   - then round the scale to float32 (what is stored), and raise any scale below float32's smallest normal number
#     `2**-126` (`np.finfo(np.float32).tiny`) to it: an all-zero block gets that scale, never 0 (nothing divides
#     by 0, nothing becomes NaN);
#   - asymmetric `zero_point = qmin - round(lo / scale)`, computed in float64 **with the float32 scale** just
#     stored, rounded half to even (`np.round`), clipped to `[qmin, qmax]`, as int32.
# - **`quantize(x, scale, zero_point, bits=8, symmetric=True)`** returns int8 codes
#   `clip(round(x / scale) + zero_point, qmin, qmax)`: `x / scale` in float64 (divide, do not multiply by
#   `1 / scale`), rounded half to even (`np.round`: 2.5 -> 2, -0.5 -> 0), plus the zero point, clipped, and only
#   then cast to int8 (a cast of 200 to int8 wraps to -56). `scale` (float32) and `zero_point` (int32) come in the
#   block-parameter shape above; `symmetric` picks the clipping range.
# - **`dequantize(q, scale, zero_point)`** returns `(q - zero_point) * scale` as **float32**, from int8 codes:
#   subtract in int32 (`127 - (-128)` is 255, which int8 cannot hold), then multiply by the float32 scale.
# - The checks compare codes, zero points and scales **exactly** (they are determined bit for bit by the rules
#   above), dequantized values exactly as float32, and the dtypes of every result.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("08-quantization/affine_quantization", globals())

# %% [markdown]
# ## 1. The pieces: the code range and the block
#
# Two helpers the three functions share. `expand` repeats per-block parameters to every element of `x`
# (`np.repeat` along each axis), so that the arithmetic afterwards is elementwise.

# %% tags=["solution"]
def int_range(bits, symmetric):
    """(qmin, qmax): symmetric drops the most negative code so the range mirrors around 0."""
    ### BEGIN SOLUTION
    qmax = 2 ** (bits - 1) - 1
    return (-qmax if symmetric else -qmax - 1), qmax
    ### END SOLUTION


def block_shape(shape, granularity, group_size=None):
    """The block one (scale, zero_point) covers, for an array of `shape`."""
    ### BEGIN SOLUTION
    shape = tuple(shape)
    ones = (1,) * (len(shape) - 1)
    if granularity == "tensor":
        return shape
    if granularity == "channel":
        return (1, *shape[1:])
    if granularity == "token":
        return (*ones, shape[-1])
    if shape[-1] % group_size:
        raise ValueError(f"group_size {group_size} must divide the last dimension, {shape[-1]}")
    return (*ones, group_size)
    ### END SOLUTION


def expand(params, shape):
    """Per-block parameters repeated to every element of an array of `shape`."""
    ### BEGIN SOLUTION
    params = np.asarray(params)
    for axis, size in enumerate(shape):
        params = np.repeat(params, size // params.shape[axis], axis=axis)
    return params
    ### END SOLUTION


# %% [markdown]
# ## 2. Choosing the parameters
#
# Reshape `x` so that each block's elements sit on axes of their own, e.g. `x.reshape(n0, b0, n1, b1, ...)`, and
# reduce over the `b` axes.

# %% tags=["solution"]
def choose_qparams(x, bits=8, symmetric=True, granularity="tensor", group_size=None):
    """(scale float32, zero_point int32) per block, of shape x.shape // block."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    qmin, qmax = int_range(bits, symmetric)
    block = block_shape(x.shape, granularity, group_size)
    grouped = x.reshape([d for n, b in zip(x.shape, block) for d in (n // b, b)])
    inner = tuple(range(1, grouped.ndim, 2))  # the axes inside a block
    if symmetric:
        scale = np.abs(grouped).max(axis=inner) / qmax
    else:
        low = np.minimum(grouped.min(axis=inner), 0.0)  # the range holds 0
        high = np.maximum(grouped.max(axis=inner), 0.0)
        scale = (high - low) / (qmax - qmin)
    scale = np.maximum(scale.astype(np.float32), np.finfo(np.float32).tiny)  # all zeros: no division by 0
    if symmetric:
        return scale, np.zeros(scale.shape, np.int32)
    zero_point = np.clip(qmin - np.round(low / scale.astype(np.float64)), qmin, qmax)
    return scale, zero_point.astype(np.int32)
    ### END SOLUTION


# %% tags=["check"]
check("choose_qparams")
### BEGIN HIDDEN TESTS
check("choose_qparams", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The checks read what `choose_qparams` raises through this provided helper (you need not change it): the error's
# type and message, or `None` when it returns.

# %%
def refusal(**arguments):
    """[type name, message] of what choose_qparams(**arguments) raises, or None if it returns."""
    try:
        choose_qparams(**arguments)
    except NotImplementedError:
        raise
    except Exception as error:  # any error is reported, and judged by the check
        return [type(error).__name__, str(error)]
    return None


# %% tags=["check"]
check("group_size_refused")
### BEGIN HIDDEN TESTS
check("group_size_refused", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Quantize and dequantize

# %% tags=["solution"]
def quantize(x, scale, zero_point, bits=8, symmetric=True):
    """int8 codes clip(round_half_even(x / scale) + zero_point, qmin, qmax)."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    qmin, qmax = int_range(bits, symmetric)
    codes = np.round(x / expand(scale, x.shape).astype(np.float64)) + expand(zero_point, x.shape)
    return np.clip(codes, qmin, qmax).astype(np.int8)
    ### END SOLUTION


def dequantize(q, scale, zero_point):
    """(q - zero_point) * scale in float32, the subtraction in int32."""
    ### BEGIN SOLUTION
    q = np.asarray(q)
    centred = q.astype(np.int32) - expand(zero_point, q.shape).astype(np.int32)
    return centred.astype(np.float32) * expand(scale, q.shape).astype(np.float32)
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

# %% [markdown]
# ## 4. Try it: the error per granularity
#
# A weight whose channel 3 is a hundred times larger than the rest: per tensor, that channel's range sets every
# code's step, per channel it sets only its own.

# %%
weight = np.random.default_rng(0).standard_normal((8, 64))
weight[3] *= 100
for granularity, group_size in [("tensor", None), ("channel", None), ("group", 16)]:
    s, z = choose_qparams(weight, bits=4, granularity=granularity, group_size=group_size)
    error = dequantize(quantize(weight, s, z, bits=4), s, z) - weight
    print(f"{granularity:8s} int4: RMS error of the small channels {np.sqrt((np.delete(error, 3, 0) ** 2).mean()):.4f}")
