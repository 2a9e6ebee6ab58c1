# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: mixed precision, bit by bit
#
# **You will learn** how a float32 becomes a bfloat16 by arithmetic on its bit pattern (round
# to nearest, ties to even) and what hardware does at the edges: NaN, overflow, subnormals; why
# an FP16 weight ignores a small update, and why mixed-precision training keeps an FP32 copy of
# the weights; where a running sum stops growing; and how the error of a dot product depends on
# the precision it accumulates in and on the order of its additions: a worst case of $n u$
# against a typical $\sqrt{n}\,u$.
#
# A Tensor Core multiplies FP16, BF16 or TF32 inputs and adds the products into an FP32
# accumulator. Here you emulate that arithmetic in numpy, exactly, so that you can watch every
# rounding. The formats (IEEE 754-2019 for FP32 and FP16; NVIDIA's A100 whitepaper for TF32;
# Kalamkar et al. 2019 for BF16):
#
# | format | exponent bits | stored fraction bits | precision $p$ | unit roundoff $u = 2^{-p}$ | largest finite |
# |---|--:|--:|--:|--:|--:|
# | FP32 | 8 | 23 | 24 | $2^{-24} \approx 6.0 \times 10^{-8}$ | $3.40 \times 10^{38}$ |
# | TF32 | 8 | 10 | 11 | $2^{-11} \approx 4.9 \times 10^{-4}$ | $3.40 \times 10^{38}$ |
# | BF16 | 8 | 7 | 8 | $2^{-8} \approx 3.9 \times 10^{-3}$ | $3.39 \times 10^{38}$ |
# | FP16 | 5 | 10 | 11 | $2^{-11} \approx 4.9 \times 10^{-4}$ | $65504$ |
#
# A normal number is $\pm 1.f \times 2^{e}$: the leading 1 is not stored, so the precision $p$
# is one more than the stored fraction bits. Between $2^e$ and $2^{e+1}$ the values lie
# $2^{e+1-p}$ apart; rounding to the nearest one errs by at most half that, a relative error of
# at most $u = 2^{-p}$.
#
# Replace each `raise NotImplementedError()` with your code, then run the check cell below it.
# The checks you see use a few fixed cases; when your work is graded, hidden checks run the same
# functions on many more values, including every edge named in the text. When grading,
# `aisys.mixed_precision` (the reference answers) cannot be imported.

# %%
import math

import numpy as np
from aisys_grader import checker

check = checker("03-tensor-cores/mixed_precision", globals())

FRACTION_BITS = {"fp32": 23, "tf32": 10, "bf16": 7, "fp16": 10}  # stored fraction bits of each format


# %% [markdown]
# ## 1. BF16 from the bits of a float32
#
# A float32 is 32 bits: sign (1), exponent (8), fraction (23). A BF16 value is the top 16 of
# them: the same sign and exponent, 7 fraction bits. So rounding to BF16 is rounding the bit
# pattern, read as an integer, to a multiple of $2^{16}$; numpy shows you the pattern with
# `x.view(np.uint32)`.
#
# Round to nearest, ties to even (IEEE 754's default): add `0x7FFF` plus the lowest kept bit
# (bit 16), then clear the low 16 bits. If the dropped bits are above `0x8000` the addition
# carries into the kept bits (rounding up), below it does not (rounding down), and at exactly
# `0x8000`, a tie, it carries only when the lowest kept bit is 1, which leaves the kept part
# even. The exponent sits just above the fraction, so a carry out of the fraction raises it:
# `0x3F7FFFFF` (0.99999994) rounds to `0x3F800000` (1.0), and `0x7F7FFFFF`, the largest
# float32, to `0x7F800000`, which is inf, as in hardware. Subnormals (exponent 0) need nothing
# special.
#
# NaN does: it has an all-ones exponent and any nonzero fraction, and a NaN whose payload lies
# only in the dropped bits (`0x7F800001`) would come out as `0x7F800000`, inf. Keep NaN as NaN.
# Do the addition in `np.uint64` so that it cannot wrap around.
#
# `round_low_bits(x, dropped)` does this for any number of dropped bits: 16 for BF16, 13 for
# TF32, which keeps 10 fraction bits. It takes and returns float32 arrays of any shape.

# %% tags=["solution"]
def round_low_bits(x: np.ndarray, dropped: int) -> np.ndarray:
    """float32 x rounded to nearest (ties to even) on its bits, keeping all but the low `dropped` fraction bits."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    lowest_kept = (bits >> dropped) & 1
    rounded = (bits + (1 << (dropped - 1)) - 1 + lowest_kept) >> dropped << dropped
    result = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), result)
    ### END SOLUTION


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 x rounded to the nearest BF16 value, ties to even, returned as float32."""
    ### BEGIN SOLUTION
    return round_low_bits(x, 16)
    ### END SOLUTION


# %% tags=["check"]
check("round_to_bf16")
### BEGIN HIDDEN TESTS
check("round_to_bf16", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Four formats
#
# `round_to(x, dtype)` rounds float32 values to `"fp32"` (nothing to do), `"tf32"`, `"bf16"` or
# `"fp16"`, and returns float32 values that the format represents exactly. For FP16, numpy's
# own conversion `x.astype(np.float16)` rounds to nearest even, keeps subnormals (down to
# $2^{-24}$) and turns values of 65520 and more into inf; convert back to float32.

# %% tags=["solution"]
def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 x rounded to nearest (ties to even) in dtype: 'fp32', 'tf32', 'bf16' or 'fp16'; returned as float32."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp32":
        return x
    if dtype == "tf32":
        return round_low_bits(x, 23 - FRACTION_BITS["tf32"])
    if dtype == "bf16":
        return round_to_bf16(x)
    if dtype == "fp16":
        with np.errstate(over="ignore"):  # overflow to inf is the right answer here
            return x.astype(np.float16).astype(np.float32)
    raise ValueError(f"dtype must be 'fp32', 'tf32', 'bf16' or 'fp16', got {dtype!r}")
    ### END SOLUTION


# %% tags=["check"]
check("round_to")
### BEGIN HIDDEN TESTS
check("round_to", hidden=True)
### END HIDDEN TESTS

# %%
samples = np.array([np.pi, 0.1, 1 + 2**-9, 70000.0, 1e-6], dtype=np.float32)
for dtype in FRACTION_BITS:
    print(f"{dtype}: " + "  ".join(f"{v:.9g}" for v in round_to(samples, dtype)))

# %% [markdown]
# ## 3. A lost update, and FP32 master weights
#
# Take a weight $w = 2^{-3}$ stored in FP16 and a gradient step of $2^{-14}$. FP16 values
# between $2^{-3}$ and $2^{-2}$ lie $2^{-3} \cdot 2^{-10} = 2^{-13}$ apart, so
# $2^{-3} + 2^{-14}$ lies exactly halfway between $2^{-3}$ and the next value; the tie goes to
# the even significand, which is $2^{-3}$'s. The update is lost, and so is every smaller one:
# the same gradient times a learning rate below 1. Training in FP16 alone stalls this way.
# Micikevicius et al. ("Mixed Precision Training", ICLR 2018) keep an FP32 **master copy** of
# the weights: there $2^{-3}$'s neighbours lie $2^{-26}$ apart, the update counts, and each step
# the FP16 copy used in the forward and backward passes is rounded from the master.
#
# `lost_update(w, update, dtype)` rounds `w` and `update` to `dtype` (both are values of it),
# adds them, rounds the sum, and says whether it equals `w`. Mind the sign: just below a power
# of two the spacing is half as large.

# %% tags=["solution"]
def lost_update(w: float, update: float, dtype: str) -> bool:
    """True when w + update, computed in dtype, rounds back to w."""
    ### BEGIN SOLUTION
    w, update = round_to(w, dtype), round_to(update, dtype)
    return bool(round_to(np.float64(w) + np.float64(update), dtype) == w)
    ### END SOLUTION


# %% tags=["check"]
check("lost_update")
### BEGIN HIDDEN TESTS
check("lost_update", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A thousand steps of $+2^{-14}$ from $2^{-3}$, in FP16 alone and with an FP32 master copy:

# %%
fp16_only = master = 2.0**-3
for step in range(1000):
    fp16_only = float(round_to(fp16_only + 2.0**-14, "fp16"))
    master = float(round_to(master + 2.0**-14, "fp32"))
print(f"FP16 only: {fp16_only}; FP32 master: {master}, its FP16 copy: {float(round_to(master, 'fp16'))}; "
      f"exact: {2.0**-3 + 1000 * 2.0**-14}")

# %% [markdown]
# ## 4. Where counting stops
#
# Count by adding 1 in a format: every integer up to $2^p$ is exact, but from $2^p$ on the
# values lie 2 apart. `stagnation(dtype)` returns the smallest positive integer $n$ with
# $n + 1 = n$ in `dtype`. Think before you loop: in FP32 the answer is above ten million.

# %% tags=["solution"]
def stagnation(dtype: str) -> int:
    """The smallest positive integer n for which n + 1, rounded to dtype, is n."""
    ### BEGIN SOLUTION
    return 2 ** (FRACTION_BITS[dtype] + 1)
    ### END SOLUTION


# %% tags=["check"]
check("stagnation")
### BEGIN HIDDEN TESTS
check("stagnation", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. A dot product in mixed precision
#
# `dot(a, b, storage, accumulate, order)` computes $\sum_i a_i b_i$ the way a unit with
# `storage` inputs and an `accumulate` accumulator would, every step rounded to nearest even:
#
# 1. round `a` and `b` to `storage`;
# 2. form each product exactly and round it to `accumulate`;
# 3. add the products, rounding every partial sum to `accumulate`: one running sum from left
#    to right (`order="sequential"`), or a tree (`order="pairwise"`) that adds neighbours
#    $(t_0 + t_1), (t_2 + t_3), \dots$ level by level, an odd one out joining the next level
#    unchanged, until one value is left.
#
# Return the result as a Python float. A Tensor Core's FP16 matrix multiply with FP32
# accumulation is `storage="fp16", accumulate="fp32"`. Its products lose nothing: two 11-bit
# significands multiply to at most 22 bits, which fit FP32's 24. The sum is where error grows.
#
# Form each product and each sum in float64 and round it with your `round_to`. float64 holds
# every product of two float32 values exactly, and a sum of two `accumulate` values rounded to
# float32 and then to `accumulate` is that sum rounded once: double rounding cannot go wrong
# when the first keeps at least $2p + 1$ bits (Figueroa, 1995).

# %% tags=["solution"]
def dot(a: np.ndarray, b: np.ndarray, storage: str, accumulate: str, order: str = "sequential") -> float:
    """a . b with inputs rounded to storage, and every product and partial sum rounded to accumulate."""
    ### BEGIN SOLUTION
    exact = round_to(a, storage).astype(np.float64) * round_to(b, storage)
    terms = round_to(exact, accumulate)
    if order == "sequential":
        total = terms[0]
        for term in terms[1:]:
            total = round_to(np.float64(total) + term, accumulate)
        return float(total)
    while terms.size > 1:
        paired = terms.size // 2 * 2
        sums = round_to(terms[0:paired:2].astype(np.float64) + terms[1:paired:2], accumulate)
        terms = np.concatenate([sums, terms[paired:]])
    return float(terms[0])
    ### END SOLUTION


# %% tags=["check"]
check("dot")
### BEGIN HIDDEN TESTS
check("dot", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Sum 3000 ones (as $a \cdot b$ with both all ones) and compare:

# %%
ones = np.ones(3000, dtype=np.float32)
for storage, accumulate in [("fp16", "fp16"), ("bf16", "bf16"), ("fp16", "fp32")]:
    print(f"{storage} inputs, {accumulate} accumulator: sequential {dot(ones, ones, storage, accumulate):6.0f}, "
          f"pairwise {dot(ones, ones, storage, accumulate, 'pairwise'):6.0f}")

# %% [markdown]
# ## 6. How the error grows
#
# Each rounding multiplies a value by $(1 + \delta)$ with $|\delta| \le u$. Sequentially, the
# first product passes through $n = K$ roundings (its own, then $K - 1$ additions); in a
# pairwise tree every product passes through $n = \lceil \log_2 K \rceil + 1$. If all of them
# err the same way, the product of the $(1 + \delta)$ factors reaches
# $\gamma_n = nu / (1 - nu)$, and Higham ("Accuracy and Stability of Numerical Algorithms",
# 2nd ed., 2002, section 3.1) proves that this bounds the error for every input:
#
# $$|\hat s - s| \le \gamma_n \sum_i |a_i b_i|,$$
#
# where $\hat s$ is the computed and $s$ the exact dot product (of the rounded inputs). For data
# of one sign the sum on the right is $|s|$, and $\gamma_n$ bounds the relative error itself.
# When $nu \ge 1$ the bound says nothing: return `math.inf`.
#
# Rounding errors of random data are not all of one sign. Treat them as independent random
# signs: $n$ of them add like a random walk, to about $\sqrt{n}\,u$ (Higham and Mary, SIAM J.
# Sci. Comput., 2019). `typical_error` predicts the typical relative error $|\hat s - s| / |s|$
# for random data of mixed sign; the check compares your prediction with the median error of
# 128 random dot products, within a factor of 10.

# %% tags=["solution"]
def roundings(K: int, order: str) -> int:
    """How many roundings each product passes through in a length-K dot product."""
    ### BEGIN SOLUTION
    return K if order == "sequential" else math.ceil(math.log2(K)) + 1
    ### END SOLUTION


def error_bound(K: int, accumulate: str, order: str = "sequential") -> float:
    """gamma_n = n u / (1 - n u), the worst case of |computed - exact| / sum |a_i b_i|; inf if n u >= 1."""
    ### BEGIN SOLUTION
    n = roundings(K, order)
    u = 2.0 ** -(FRACTION_BITS[accumulate] + 1)
    return n * u / (1 - n * u) if n * u < 1 else math.inf
    ### END SOLUTION


# %% tags=["check"]
check("error_bound")
### BEGIN HIDDEN TESTS
check("error_bound", hidden=True)
### END HIDDEN TESTS

# %% tags=["solution"]
def typical_error(K: int, accumulate: str, order: str = "sequential") -> float:
    """The typical relative error of a length-K dot product of random data of mixed sign."""
    ### BEGIN SOLUTION
    return math.sqrt(roundings(K, order)) * 2.0 ** -(FRACTION_BITS[accumulate] + 1)
    ### END SOLUTION


# %% tags=["check"]
check("typical_error")
### BEGIN HIDDEN TESTS
check("typical_error", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your predictions against your own `dot`, on standard normal FP16 data accumulated in FP16
# (the median of 8 trials). Sequentially the error grows like $\sqrt{K}$; pairwise it hardly
# grows at all, and both stay far below the worst case.

# %%
rng = np.random.default_rng(0)
print("    K  order         measured  typical  bound")
for order in ("sequential", "pairwise"):
    for K in (16, 64, 256, 512):
        errors = []
        for trial in range(8):
            a, b = rng.standard_normal((2, K)).astype(np.float32)
            exact = math.fsum(round_to(a, "fp16").astype(np.float64) * round_to(b, "fp16"))
            errors.append(abs(dot(a, b, "fp16", "fp16", order) - exact) / abs(exact))
        print(f"{K:5d}  {order:12s}  {np.median(errors):.1e}  {typical_error(K, 'fp16', order):.1e}  "
              f"{error_bound(K, 'fp16', order):.1e}")
