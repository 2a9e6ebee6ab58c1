# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: floats bit by bit
#
# **You will learn** to take a floating-point number apart and put it back together, bit by bit: sign, biased
# exponent and fraction; subnormals; the three rounding modes; overflow, saturation, infinities and NaN; for the six
# formats AI hardware computes in (FP32, TF32, FP16, BF16 and the two FP8 formats of Micikevicius et al. 2022, "FP8
# Formats for Deep Learning", arXiv 2209.05433, section 3 and table 1). Every cast to a low-precision format, in a
# kernel, a quantizer or a checkpoint converter, is this function; the checks compare yours with the reference
# implementation of the ML formats, `ml_dtypes`, on **every** 8- and 16-bit code.
#
# **The conventions, all of them:**
# - **`decode(codes, fmt)`** returns the float64 values of an array of codes (any shape), **`encode(values, fmt,
#   rounding="nearest_even", saturate=False)`** the codes of an array of float64 values (float32 arrays convert
#   to float64 exactly): the same shape, unsigned integers of the format's width, **uint32** for `"fp32"` and
#   `"tf32"`, **uint16** for `"fp16"` and `"bf16"`, **uint8** for `"fp8_e4m3"` and `"fp8_e5m2"` (the checks
#   check the dtype). `fmt` is one of the keys of `FORMATS` below.
# - **Layout.** A code is, from its top bit: 1 sign bit, `e` exponent bits, `m` fraction bits (`FORMATS` gives the
#   width, `e`, `m`). The exponent is stored with the bias `2**(e-1) - 1` (127, 15, 7). A field of zero means a
#   **subnormal**: `(-1)^s x 0.fraction x 2^(1 - bias)`; else a **normal**: `(-1)^s x 1.fraction x 2^(field - bias)`.
#   **TF32** (e = 8, m = 10) is kept as NVIDIA's Tensor Cores keep it, in an FP32 register: its code is the 32-bit
#   FP32 pattern whose low 13 bits are zero (so `code.view(np.float32)` is its value). `decode` may assume they are
#   zero.
# - **Specials.** FP32, TF32, FP16, BF16 and E5M2 are IEEE-like (`has_inf`): the all-ones exponent holds **inf**
#   (fraction zero) and **NaN** (any other fraction). **E4M3 has no infinity** (the "fn" variant of the paper and of
#   the OCP 8-bit floating point specification; `torch.float8_e4m3fn`, `ml_dtypes.float8_e4m3fn`): only
#   `S.1111.111` is NaN, and the rest of the top binade holds numbers, up to 1.75 x 2^8 = 448.
# - **Rounding** (IEEE 754-2019, section 4.3), of the float64 input **once**, from its own bits:
#   `"nearest_even"`: to the nearest value, a tie to the one whose last fraction bit is 0 (zero's is 0);
#   `"nearest_away"`: to the nearest, a tie away from zero (what NVIDIA's `cvt.rna.tf32.f32` does when a Tensor Core
#   takes an FP32 input as TF32: PTX ISA, `cvt`); `"toward_zero"`: truncate the magnitude. A value past the largest
#   fraction of its binade rounds into the next binade (1.9375 is 2.0 in E4M3), the smallest subnormals round to
#   zero, a subnormal can round up to the smallest normal. Any other `rounding` raises **ValueError** naming
#   `rounding`; an unknown `fmt`, **ValueError** naming `fmt`.
# - **Overflow** (IEEE 754-2019, section 7.4): a finite value whose *rounded* magnitude is larger than the largest
#   finite value gives **inf** in `"nearest_even"` and `"nearest_away"` (for E4M3, which has no inf, **NaN**: 464 is a
#   tie between 448 and 480 and rounds to 448; 465 rounds to 480, which E4M3 cannot hold); in `"toward_zero"` it
#   gives the largest finite value. An infinite input gives inf (E4M3: NaN). **With `saturate=True`** every overflow
#   and every infinite input gives the largest finite value of its sign (NVIDIA's `.satfinite`, the OCP
#   specification's saturating conversion); NaN stays NaN.
# - **NaN and zero.** A NaN input encodes as the **quiet NaN with the input's sign**: all-ones exponent and only the
#   top fraction bit set (FP32 `0x7FC00000`, FP16 `0x7E00`, BF16 `0x7FC0`, E5M2 `0x7E`), E4M3's only NaN
#   (`0x7F`); with `saturate` or without. Every NaN code decodes to a NaN (its sign is not checked). **-0** has the
#   sign bit set (`0x80` in FP8) and decodes to `-0.0`; a negative value that rounds to zero encodes as -0.
# - **Speed: every code is checked.** The hidden checks decode every 8- and 16-bit code and encode every value and
#   every tie between neighbours, in every mode: about 1.3 million values, in calls of up to 65,536 values. Each
#   call may take **1 s of CPU time**. Work on whole arrays (`np.frexp`, `np.ldexp`, `np.floor`, `np.where`, integer
#   shifts and masks): that takes about 10 ms a call. A loop that calls numpy on one value at a time takes over 2 s
#   a call and fails; a loop in pure Python (`math.frexp`) passes, at several times the cost.
#
# You may not use `ml_dtypes`, torch's or numpy's casts to the target format (`astype(np.float16)` and the like): the
# point is to do what they do. (A cast from float64 to float32 would round twice anyway: see section 3.)
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("01-architecture/floats", globals())

# name: (bits of a code, exponent bits e, fraction bits m, has_inf)
FORMATS = {
    "fp32": (32, 8, 23, True),
    "tf32": (32, 8, 10, True),
    "fp16": (16, 5, 10, True),
    "bf16": (16, 8, 7, True),
    "fp8_e4m3": (8, 4, 3, False),
    "fp8_e5m2": (8, 5, 2, True),
}
CODE_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32}
ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero")


def show(codes, fmt):
    """Codes as 'S.EEEE.MMM' strings, for looking (provided)."""
    width, e, m, _ = FORMATS[fmt]
    shift = width - 1 - e - m
    out = []
    for c in np.atleast_1d(np.asarray(codes, dtype=np.int64)):
        b = format(int(c) >> shift, f"0{1 + e + m}b")
        out.append(f"{b[0]}.{b[1:1 + e]}.{b[1 + e:]}")
    return out


# %% [markdown]
# ## 1. Decode
#
# Split each code into sign, exponent field and fraction with shifts and masks, then build the value with
# `np.ldexp(significand, exponent)` (exact in float64: every value of these formats is a float64).

# %% tags=["solution"]
def layout(fmt):
    """(width, e, m, has_inf, bias, shift) of a format; ValueError naming fmt for an unknown one."""
    ### BEGIN SOLUTION
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}; got {fmt!r}")
    width, e, m, has_inf = FORMATS[fmt]
    bias = 2 ** (e - 1) - 1
    return width, e, m, has_inf, bias, width - 1 - e - m
    ### END SOLUTION


def decode(codes, fmt):
    """float64 values of the codes: subnormal where the exponent field is 0; inf and NaN where the format says."""
    ### BEGIN SOLUTION
    width, e, m, has_inf, bias, shift = layout(fmt)
    c = np.asarray(codes).astype(np.int64) >> shift
    negative = (c >> (e + m)) & 1
    field = (c >> m) & (2**e - 1)
    fraction = (c & (2**m - 1)).astype(np.float64)
    value = np.where(field == 0, np.ldexp(fraction, 1 - bias - m),  # subnormal: 0.fraction x 2^(1 - bias)
                     np.ldexp(fraction + 2**m, field - bias - m))
    top = field == 2**e - 1
    if has_inf:
        value = np.where(top, np.where(fraction == 0, np.inf, np.nan), value)
    else:  # E4M3: only S.1111.111 is NaN
        value = np.where(top & (fraction == 2**m - 1), np.nan, value)
    return np.where(negative == 1, -value, value)
    ### END SOLUTION


# %% tags=["check"]
check("decode")
### BEGIN HIDDEN TESTS
check("decode", hidden=True)
### END HIDDEN TESTS

# %%
print(show([0x38, 0x7E, 0x7F, 0x01, 0x80], "fp8_e4m3"), decode(np.array([0x38, 0x7E, 0x7F, 0x01, 0x80], np.uint8),
                                                                 "fp8_e4m3"))

# %% [markdown]
# ## 2. Encode
#
# One way: find the binade of `|x|` (`np.frexp`), never below the smallest normal one (subnormals share its
# spacing); scale `|x|` so that one step of the format is 1 (`np.ldexp`: exact); round that to an integer `n` in the
# mode asked for; pack the exponent field and the fraction; then the specials: overflow, inf, NaN.

# %% tags=["solution"]
def encode(values, fmt, rounding="nearest_even", saturate=False):
    """Codes of float64 values (uint8/uint16/uint32 by width), rounded once; overflow, inf, NaN and -0 as stated."""
    ### BEGIN SOLUTION
    width, e, m, has_inf, bias, shift = layout(fmt)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}; got {rounding!r}")
    x = np.asarray(values, dtype=np.float64)
    negative = np.signbit(x)
    nan, inf = np.isnan(x), np.isinf(x)
    a = np.where(nan | inf, 0.0, np.abs(x))

    emin = 1 - bias
    emax = (2**e - 2 if has_inf else 2**e - 1) - bias  # E4M3's top binade holds numbers
    largest_n = 2 ** (m + 1) - (1 if has_inf else 2)  # ... but not its all-ones fraction (NaN)
    largest = np.ldexp(float(largest_n), emax - m)

    _, k = np.frexp(a)  # a = f x 2^k, f in [0.5, 1): a lies in the binade [2^(k-1), 2^k)
    exp = np.maximum(k - 1, emin).astype(np.int64)
    scaled = np.ldexp(a, m - exp)  # one step of the format is 1 here
    n = np.floor(scaled)
    rest = scaled - n
    if rounding == "nearest_even":
        up = (rest > 0.5) | ((rest == 0.5) & (n % 2 == 1))
    elif rounding == "nearest_away":
        up = rest >= 0.5
    else:
        up = np.zeros(rest.shape, dtype=bool)  # toward zero: drop the rest of the magnitude
    n = (n + up).astype(np.int64)
    overflow = np.ldexp(n.astype(np.float64), exp - m) > largest

    carry = n == 2 ** (m + 1)  # 1.11...1 rounded up is 10.00...0: the next binade
    exp, n = np.where(carry, exp + 1, exp), np.where(carry, 2**m, n)
    field = np.where(n >= 2**m, exp + bias, 0)  # below 2^m: subnormal (a subnormal rounded up to 2^m is normal)
    codes = (field << m) | (n & (2**m - 1))

    largest_code = ((emax + bias) << m) | (largest_n - 2**m)
    nan_code = (2**e - 1) << m | (2 ** (m - 1) if has_inf else 2**m - 1)
    inf_code = (2**e - 1) << m if has_inf else nan_code  # E4M3 has no inf
    overflow_code = largest_code if saturate or rounding == "toward_zero" else inf_code
    codes = np.where(overflow, overflow_code, codes)
    codes = np.where(inf, largest_code if saturate else inf_code, codes)
    codes = np.where(nan, nan_code, codes)

    codes = (codes << shift) | (negative.astype(np.int64) << (width - 1))
    return codes.astype(CODE_DTYPES[width])
    ### END SOLUTION


# %% tags=["check"]
check("encode_exact")
### BEGIN HIDDEN TESTS
check("encode_exact", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("encode_ties")
### BEGIN HIDDEN TESTS
check("encode_ties", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("encode_between")
### BEGIN HIDDEN TESTS
check("encode_between", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("subnormals_and_zero")
### BEGIN HIDDEN TESTS
check("subnormals_and_zero", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("overflow_and_saturation")
### BEGIN HIDDEN TESTS
check("overflow_and_saturation", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("nan")
### BEGIN HIDDEN TESTS
check("nan", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. FP32 and TF32 from float64
#
# FP32 is the same function with e = 8 and m = 23. Rounding happens once: `np.float32(x)` then a cast to BF16
# would round twice, and a float64 just above a BF16 tie would become the tie, then round to even, down. (ml_dtypes
# converts float64 this way, through float32: the checks use values where that makes no difference, except this
# section's, where it does.) TF32 is FP32 with 10 fraction bits: a Tensor Core reads an FP32 input as TF32 by
# rounding ties away from zero.

# %% tags=["check"]
check("fp32_and_tf32")
### BEGIN HIDDEN TESTS
check("fp32_and_tf32", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The checks read what `encode` raises through this provided helper: the error's type and message, or `None` when
# it returns.

# %%
def refusal(**arguments):
    """[type name, message] of what encode(**arguments) raises, or None if it returns."""
    try:
        encode(**arguments)
    except NotImplementedError:
        raise
    except Exception as error:  # any error is reported, and judged by the check
        return [type(error).__name__, str(error)]
    return None


# %% tags=["check"]
check("refused")
### BEGIN HIDDEN TESTS
check("refused", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Try it: E4M3 at the top of its range

# %%
for x in (448.0, 456.0, 464.0, 465.0, 1e4, float("inf")):
    row = [show(encode([x], "fp8_e4m3", r, s), "fp8_e4m3")[0] for r in ROUNDINGS for s in (False, True)]
    print(f"{x:>8}", " ".join(row))
