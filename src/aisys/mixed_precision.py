"""Low-precision floating point emulated in numpy, bit-exact: formats, rounding, lost updates, rounded dot products.

A Tensor Core multiplies FP16, BF16 or TF32 inputs and adds the products into an
FP32 accumulator (NVIDIA A100 whitepaper, 2020). This module emulates such
arithmetic on a CPU with one rule, the standard model of Higham, "Accuracy and
Stability of Numerical Algorithms" (2nd ed., 2002), section 2.2: every result is
the exact result rounded to nearest, ties to even (IEEE 754-2019, 4.3.1).

`round_to(x, dtype)` rounds to FP32, TF32, BF16 or FP16. `dot(a, b, storage,
accumulate)` rounds the inputs to `storage`, each product and each partial sum
to `accumulate`, adding sequentially or in a pairwise tree. Products and sums are
formed in float64, where they are exact or innocuous (see `_accumulate`), so
the result is the model's, bit for bit. Functions at the end predict and
measure how the error of a length-K dot product grows with K.
"""

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ._validate import one_of, positive_int
from .dtypes import ALIASES, bytes_per_element


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: a sign bit, `exponent_bits` and `mantissa_bits` stored fraction bits."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    largest: float  # the largest finite value
    source: str

    @property
    def bits(self) -> int:
        """Bits that carry information (TF32 is held in 32-bit registers but uses 19)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """p, the significant bits of a normal number: the stored fraction and the implicit leading 1."""
        return self.mantissa_bits + 1

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-p: the largest relative error of rounding to nearest (half the gap after 1)."""
        return 2.0 ** -self.precision

    @property
    def smallest_normal(self) -> float:
        bias = 2 ** (self.exponent_bits - 1) - 1
        return 2.0 ** (1 - bias)

    @property
    def smallest_subnormal(self) -> float:
        return self.smallest_normal * 2.0 ** -self.mantissa_bits


def _ieee_like(name: str, exponent_bits: int, mantissa_bits: int, source: str) -> Format:
    """A format whose all-ones exponent is kept for inf and NaN, as in IEEE 754."""
    bias = 2 ** (exponent_bits - 1) - 1
    return Format(name, exponent_bits, mantissa_bits, (2 - 2.0 ** -mantissa_bits) * 2.0 ** bias, source)


FORMATS = {
    fmt.name: fmt
    for fmt in [
        _ieee_like("fp64", 11, 52, "IEEE 754-2019 binary64"),
        _ieee_like("fp32", 8, 23, "IEEE 754-2019 binary32"),
        _ieee_like("tf32", 8, 10, "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"),
        _ieee_like("bf16", 8, 7, "Kalamkar et al., A Study of BFLOAT16 for Deep Learning Training (2019)"),
        _ieee_like("fp16", 5, 10, "IEEE 754-2019 binary16"),
        _ieee_like("fp8_e5m2", 5, 2, "Micikevicius et al., FP8 Formats for Deep Learning (2022)"),
        # E4M3 keeps only S.1111.111 for NaN and has no inf, so its top binade holds numbers up to 1.75 * 2^8.
        Format("fp8_e4m3", 4, 3, 448.0, "Micikevicius et al., FP8 Formats for Deep Learning (2022)"),
    ]
}

# What mixed-precision training with Adam keeps per parameter (Rajbhandari et al., "ZeRO: Memory Optimizations
# Toward Training Trillion Parameter Models", SC 2020, section 3.1): fp16 parameters and gradients, and for the
# optimizer an fp32 copy of the parameters with Adam's momentum and variance: 2Ψ + 2Ψ + KΨ bytes for Ψ parameters,
# with K = 12, 16Ψ in all.
# Activations, buffers and fragmentation come on top.
ADAM_MIXED_PRECISION_STATES = (("weights", "fp16"), ("gradients", "fp16"), ("master weights", "fp32"),
                               ("Adam momentum", "fp32"), ("Adam variance", "fp32"))


def training_bytes_per_parameter(states=ADAM_MIXED_PRECISION_STATES) -> float:
    """Bytes of model and optimizer state per parameter: 16 for mixed precision with Adam (ZeRO, section 3.1)."""
    return sum(bytes_per_element(dtype) for _, dtype in states)


ROUNDED = ("fp32", "tf32", "bf16", "fp16")  # the formats round_to emulates
ORDERS = ("sequential", "pairwise")


def _format(name: str, value, choices=tuple(FORMATS)) -> str:
    """The short name of a format (torch's long names accepted), or a ValueError naming the argument."""
    short = ALIASES.get(value, value) if isinstance(value, str) else value
    return one_of(name, short, choices)


def _floats(name: str, x) -> np.ndarray:
    """`x` as a float16, float32 or float64 array (integers become float64); TypeError for anything else."""
    array = np.asarray(x)
    if array.dtype.kind in "iu":
        array = array.astype(np.float64)
    if array.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name} must hold real numbers (a float or integer array or scalar), got dtype {array.dtype}")
    return array


def _number(name: str, value) -> np.float64:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return np.float64(value)


def unit_roundoff(dtype: str) -> float:
    """u = 2^-p of a format: fp32 2^-24, tf32 and fp16 2^-11, bf16 2^-8."""
    return FORMATS[_format("dtype", dtype)].unit_roundoff


def stagnation(dtype: str) -> int:
    """The smallest positive integer n with n + 1 == n in `dtype`: 2^p (fp16 2048, bf16 256, fp32 2^24).

    Every integer up to 2^p is exact. At 2^p the gap between neighbours becomes 2, so
    2^p + 1 lies halfway between 2^p and 2^p + 2 and rounds to the one with an even
    significand, 2^p: a running count of ones stops there.
    """
    return 2 ** FORMATS[_format("dtype", dtype)].precision


# ---------------------------------------------------------------- rounding


def _round_float32_bits(x32: np.ndarray, dropped: int) -> np.ndarray:
    """float32 values rounded to nearest even with their low `dropped` fraction bits cleared (bf16: 16, tf32: 13).

    Adding 0x7FFF (for 16 bits) plus the lowest kept bit, then clearing the dropped
    bits, rounds half to even: a tie (dropped bits 0x8000) carries into the kept bits
    only when they are odd. A carry out of the fraction raises the exponent, which is
    right (1.11..1 x 2^e rounds up to 2^(e+1)), and the values above the largest
    finite one become inf, as in hardware; subnormals need nothing special. NaN is
    kept apart: adding to its bit pattern can clear its fraction (inf) or wrap it to 0.
    """
    bits = x32.view(np.uint32).astype(np.uint64)  # 64 bits: the addition must not wrap around
    kept_lsb = (bits >> np.uint64(dropped)) & np.uint64(1)
    half_minus_one = np.uint64((1 << (dropped - 1)) - 1)
    cleared = np.uint64(0xFFFFFFFF ^ ((1 << dropped) - 1))
    rounded = ((bits + half_minus_one + kept_lsb) & cleared).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x32), np.float32("nan"), rounded)


def _float64_to_float32_odd(x64: np.ndarray) -> np.ndarray:
    """float64 values rounded to float32 "to odd": an inexact result takes the neighbour with an odd last bit.

    Rounding to nearest twice, float64 -> float32 -> bf16, errs when the first rounding
    lands exactly halfway between two bf16 values (1 + 2^-8 + 2^-40 would become 1,
    not 1 + 2^-7; torch's float64 -> bfloat16 and float16 conversions do this). After
    rounding to odd a false tie cannot arise, because float32 keeps at least two bits
    more than bf16, tf32 and fp16 (Boldo and Melquiond, IEEE Trans. Computers, 2008).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here, not mistakes
        x32 = x64.astype(np.float32)
    even = (x32.view(np.uint32) & np.uint32(1)) == 0
    inexact = np.isfinite(x32) & (x32.astype(np.float64) != x64) & even
    toward = np.where(x64 > x32, np.float32(np.inf), np.float32(-np.inf))
    return np.where(inexact, np.nextafter(x32, toward), x32)


def round_to(x, dtype: str):
    """`x` rounded to nearest (ties to even) in `dtype`: 'fp32', 'tf32', 'bf16' or 'fp16'.

    Returns float32 values (float64 for float64 input) that `dtype` represents exactly;
    overflow gives inf, NaN stays NaN, subnormals are kept (no flush to zero). float64
    input is rounded once, from its exact value.
    """
    dtype = _format("dtype", dtype, ROUNDED)
    x = _floats("x", x)
    wide = x.dtype == np.float64
    if dtype == "fp32" or not wide:
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here, not mistakes
            x32 = x.astype(np.float32)
    else:
        x32 = _float64_to_float32_odd(x)
    if dtype == "fp16":
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here, not mistakes
            x32 = x32.astype(np.float16).astype(np.float32)  # numpy's float16 cast rounds to nearest even
    elif dtype in ("bf16", "tf32"):
        x32 = _round_float32_bits(x32, 23 - FORMATS[dtype].mantissa_bits)
    return (x32.astype(np.float64) if wide else x32)[()]


def lost_update(w: float, update: float, dtype: str) -> bool:
    """True when w + update, computed in `dtype`, is w again: the update is lost.

    Both are rounded to `dtype` first (they are values of it, as a weight and a scaled
    gradient are in FP16 training), then their sum. The weight 2^-3 and the update 2^-14
    in fp16: fp16 values near 2^-3 lie 2^-13 apart, so 2^-3 + 2^-14 is exactly halfway
    and rounds to the neighbour with an even significand, 2^-3. Any smaller update (the
    gradient times a learning rate below 1) is lost too.
    """
    w = float(round_to(_number("w", w), dtype))
    update = float(round_to(_number("update", update), dtype))
    return bool(round_to(np.float64(w) + update, dtype) == w)  # rounded twice, as good as once: see _accumulate


# ---------------------------------------------------------------- accumulation


def _accumulate(terms: np.ndarray, accumulate: str, order: str) -> np.ndarray:
    """Sums over the last axis of float64 `terms` (values of `accumulate`), each addition rounded to `accumulate`.

    Sequential: s = round(s + t) for each term in turn, as one thread's loop does.
    Pairwise: adjacent pairs are added and rounded, level by level (an odd one out
    waits for the next level), as a reduction tree or blocked accumulation does.
    The sum of two values of a format of p <= 24 bits, formed in float64 (53 bits)
    and then rounded, equals the exact sum rounded once: double rounding is
    innocuous when the first keeps at least 2p + 1 bits (Figueroa, SIGNUM Newsletter, 1995).
    Returns the sequential running sums (..., K), or the pairwise total (...).
    """
    with np.errstate(invalid="ignore"):  # inf + -inf (an overflowed sum) is NaN, as in hardware
        if order == "sequential":
            sums = np.empty_like(terms)
            total = sums[..., 0] = terms[..., 0]
            for k in range(1, terms.shape[-1]):
                total = sums[..., k] = round_to(total + terms[..., k], accumulate)
            return sums
        level = terms
        while level.shape[-1] > 1:
            paired = level.shape[-1] // 2 * 2
            summed = round_to(level[..., 0:paired:2] + level[..., 1:paired:2], accumulate)
            level = np.concatenate([summed, level[..., paired:]], axis=-1)
        return level[..., 0]


def _exact_products(a: np.ndarray, b: np.ndarray, storage: str) -> np.ndarray:
    """a_i * b_i, exactly, with a and b rounded to `storage` first.

    The product of two values of at most 24 significant bits has at most 48, which float64
    holds exactly. Rounded to FP32 it changes nothing when the inputs are FP16, BF16 or TF32:
    2 x 11 = 22 bits fit FP32's 24. That is why a Tensor Core can take 16-bit inputs and add
    their products into an FP32 accumulator without losing anything in the multiplies
    (outside FP32's range: BF16 and TF32 products can still overflow or underflow).
    """
    return np.asarray(round_to(a.astype(np.float64), storage)) * round_to(b.astype(np.float64), storage)


def _vector(name: str, x) -> np.ndarray:
    array = _floats(name, x)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a 1-D array of length K >= 1, got shape {array.shape}")
    return array


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = _vector("a", a), _vector("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same length K, got {a.size} and {b.size}")
    return a, b


def rounded_sum(values, accumulate: str, order: str = "sequential") -> float:
    """The sum of `values`, each value and partial sum rounded to `accumulate` ('fp32', 'tf32', 'bf16', 'fp16')."""
    accumulate = _format("accumulate", accumulate, ROUNDED)
    order = one_of("order", order, ORDERS)
    terms = np.asarray(round_to(_vector("values", values).astype(np.float64), accumulate))
    total = _accumulate(terms, accumulate, order)
    return float(total[-1] if order == "sequential" else total)


def dot(a, b, storage: str, accumulate: str, order: str = "sequential") -> float:
    """a . b with a and b rounded to `storage`, each product and partial sum to `accumulate`.

    `storage` and `accumulate` are 'fp32', 'tf32', 'bf16' or 'fp16'; `order` is
    'sequential' (one running sum) or 'pairwise' (a tree of rounded additions).
    A Tensor Core's FP16 MMA with FP32 accumulate is storage='fp16', accumulate='fp32'.
    """
    storage = _format("storage", storage, ROUNDED)
    accumulate = _format("accumulate", accumulate, ROUNDED)
    order = one_of("order", order, ORDERS)
    a, b = _pair(a, b)
    terms = np.asarray(round_to(_exact_products(a, b, storage), accumulate))
    total = _accumulate(terms, accumulate, order)
    return float(total[-1] if order == "sequential" else total)


# ---------------------------------------------------------------- error growth


def roundings(K: int, order: str = "sequential") -> int:
    """How many roundings each product passes through in a length-K dot product: K sequentially (the
    first product, rounded, then K - 1 rounded additions), ceil(log2 K) + 1 in a pairwise tree."""
    K = positive_int("K", K)
    order = one_of("order", order, ORDERS)
    return K if order == "sequential" else (K - 1).bit_length() + 1  # (K - 1).bit_length() == ceil(log2 K)


def error_bound(K: int, accumulate: str, order: str = "sequential") -> float:
    """Worst case of |computed - exact| / sum |a_i b_i| over all length-K inputs: gamma_n = n u / (1 - n u).

    n is `roundings(K, order)` and u the unit roundoff of `accumulate` (Higham, 2002, section 3.1,
    for recursive and for pairwise summation). Each rounding may err by a factor (1 + d), |d| <= u,
    and in the worst case all err the same way. inf when n u >= 1: the bound then says nothing.
    For data of one sign, sum |a_i b_i| = |a . b| and this bounds the relative error itself.
    """
    nu = roundings(K, order) * unit_roundoff(_format("accumulate", accumulate))
    return nu / (1 - nu) if nu < 1 else math.inf


def typical_error(K: int, accumulate: str, order: str = "sequential") -> float:
    """The typical relative error |computed - exact| / |exact| for random data of mixed sign: sqrt(n) u.

    Rounding errors of random data behave like independent random signs, so n of them add
    like a random walk, to sqrt(n) u rather than n u (Higham and Mary, SIAM J. Sci. Comput.,
    2019). Sequentially the same sqrt(K) comes from the partial sums: they wander to about
    sqrt(k) times a term, each rounding errs by about u times the partial sum, and the errors
    add to about u K / sqrt(2) terms against a total of sqrt(K). Measured medians are 0.15 to
    0.7 times this. Adding equal terms, or terms smaller than half the sum's spacing (the sum
    stagnates), makes errors share a sign: they then grow like n u, up to `error_bound`.
    """
    return math.sqrt(roundings(K, order)) * unit_roundoff(_format("accumulate", accumulate))


DATA = ("random", "positive")  # standard normal inputs (mixed signs) or uniform in [0, 1)


def measured_errors(Ks, storage: str, accumulate: str, order: str = "sequential", data: str = "random",
                    trials: int = 64, seed: int = 0) -> np.ndarray:
    """Median over `trials` of |dot - exact| / |exact| for each length K in `Ks`, on seeded `data`.

    `exact` is the exact dot product of the inputs rounded to `storage` (float64 products are
    exact; math.fsum adds them exactly and rounds once), so what is measured is the error of the
    products and the accumulation. The inputs of length max(Ks) are drawn once; each K uses the
    first K of them, and the sequential order reads all the Ks off one pass of running sums.
    """
    Ks = [positive_int("Ks[]", K) for K in np.atleast_1d(Ks).tolist()]
    storage = _format("storage", storage, ROUNDED)
    accumulate = _format("accumulate", accumulate, ROUNDED)
    order = one_of("order", order, ORDERS)
    data = one_of("data", data, DATA)
    trials = positive_int("trials", trials)
    rng = np.random.default_rng(seed)
    draw = rng.standard_normal if data == "random" else rng.random
    a, b = draw((trials, max(Ks))), draw((trials, max(Ks)))  # (trials, K)
    exact_products = _exact_products(a, b, storage)
    terms = np.asarray(round_to(exact_products, accumulate))
    running = _accumulate(terms, accumulate, order) if order == "sequential" else None
    medians = []
    for K in Ks:
        computed = running[:, K - 1] if order == "sequential" else _accumulate(terms[:, :K], accumulate, order)
        exact = np.array([math.fsum(row) for row in exact_products[:, :K]])
        with np.errstate(divide="ignore", invalid="ignore"):
            medians.append(float(np.median(np.abs(computed - exact) / np.abs(exact))))
    return np.array(medians)


def growth_exponent(Ks, errors) -> float:
    """The slope of log(errors) against log(Ks), least squares: 0.5 for sqrt(K) growth, 1 for K."""
    Ks, errors = _floats("Ks", Ks), _floats("errors", errors)
    if Ks.ndim != 1 or Ks.shape != errors.shape or Ks.size < 2:
        raise ValueError(f"Ks and errors must be 1-D arrays of the same length >= 2, got shapes {Ks.shape} and "
                         f"{errors.shape}")
    if not (np.all(Ks > 0) and np.all(errors > 0) and np.all(np.isfinite(errors))):
        raise ValueError("Ks and errors must be finite and > 0 to take logarithms (an error of 0: start at a larger K)")
    slope, _ = np.polyfit(np.log(Ks), np.log(errors), 1)
    return float(slope)
