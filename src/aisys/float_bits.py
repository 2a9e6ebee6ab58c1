"""Floating-point formats bit by bit: encode real numbers into the codes of FP32, TF32, FP16, BF16 and the two FP8
formats, and decode codes back, vectorised over numpy arrays.

Every finite value of a binary format is (-1)^s x n x 2^(E - m) with m stored fraction bits, E the exponent of its
binade (never below emin = 1 - bias: there the numbers are subnormal) and n an integer below 2^(m+1). Encoding
rounds |x| / 2^(E - m) to an integer n once, in the rounding mode asked for, and packs the code as
(E - emin) x 2^m + n, which is the exponent field and the fraction at once: a carry out of the fraction (n reaching
2^(m+1)) lands in the exponent, and a subnormal rounding up to 2^m becomes the smallest normal, with no special case.

The conventions (shared with the exercise `01-architecture/floats`):

- Codes are unsigned integers of the format's width, `CODE_DTYPES`: uint32 for FP32 and TF32, uint16 for FP16 and
  BF16, uint8 for the FP8 formats. TF32 (1 sign, 8 exponent, 10 fraction bits) is held as NVIDIA's Tensor Cores hold
  it, in an FP32 register: its code is the FP32 bit pattern with the low 13 bits zero, so `code.view(float32)` is
  its value.
- FP8 E4M3 is the "fn" variant of Micikevicius et al. 2022 and the OCP 8-bit floating point specification
  (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn): no infinities, NaN only at S.1111.111, so the top binade holds
  numbers up to 1.75 x 2^8 = 448. E5M2 is IEEE-like: the all-ones exponent holds inf (fraction 0) and NaN.
- Rounding: "nearest_even" (IEEE 754-2019 roundTiesToEven, section 4.3.1), "nearest_away" (roundTiesToAway, the
  rounding of NVIDIA's cvt.rna.tf32.f32), "toward_zero" (roundTowardZero, truncation of the magnitude). The input
  (float64, or anything that converts to it exactly, such as float32) is rounded once, from its own bits.
- Overflow follows IEEE 754-2019 section 7.4: in a nearest mode a value whose rounded magnitude exceeds the largest
  finite one becomes inf (NaN in E4M3, which has no inf: 464 rounds to 448, 464 + anything to NaN); toward zero it
  becomes the largest finite value. With `saturate=True` every overflow and every infinite input becomes the largest
  finite value of its sign (NVIDIA PTX's .satfinite, the OCP specification's saturating conversion); NaN stays NaN.
- NaN encodes as the format's quiet NaN with the input's sign (what ml_dtypes does for BF16 and FP8); -0 stays -0,
  and a negative value that rounds to zero gives -0.
"""

from dataclasses import dataclass

import numpy as np

from ._validate import one_of
from .dtypes import BITS

ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero")
CODE_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32}


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, `exponent_bits`, `mantissa_bits` stored fraction bits."""

    name: str  # aisys.dtypes' name
    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool  # IEEE-like: the all-ones exponent holds inf and NaN; else only all-ones exponent and fraction is NaN
    source: str

    @property
    def width(self) -> int:
        """Bits of a code (TF32's 19 bits live in 32)."""
        return BITS[self.name]

    @property
    def code_dtype(self) -> type:
        return CODE_DTYPES[self.width]

    @property
    def shift(self) -> int:
        """Unused low bits of a code: 13 for TF32, 0 for the others."""
        return self.width - 1 - self.exponent_bits - self.mantissa_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade (subnormals share its spacing)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        top = 2**self.exponent_bits - 1  # the all-ones exponent field
        return (top - 1 if self.has_inf else top) - self.bias

    @property
    def max_finite(self) -> float:
        m = self.mantissa_bits
        largest_n = 2 ** (m + 1) - 1 - (0 if self.has_inf else 1)  # E4M3: all-ones fraction is NaN there
        return float(np.ldexp(largest_n, self.emax - m))

    @property
    def smallest_normal(self) -> float:
        return float(np.ldexp(1.0, self.emin))

    @property
    def smallest_subnormal(self) -> float:
        return float(np.ldexp(1.0, self.emin - self.mantissa_bits))

    @property
    def epsilon(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger value, 2^-m."""
        return float(np.ldexp(1.0, -self.mantissa_bits))

    @property
    def quiet_nan(self) -> int:
        """The positive NaN code encode() gives: top fraction bit set (E4M3: its only NaN, all fraction bits set)."""
        m = self.mantissa_bits
        fraction = 2**m - 1 if not self.has_inf else 2 ** (m - 1)
        return ((2**self.exponent_bits - 1) << m | fraction) << self.shift

    def nan_codes(self) -> np.ndarray:
        """Every NaN code, both signs, ascending (2 in E4M3, 2 x (2^m - 1) in the IEEE-like formats)."""
        m, top = self.mantissa_bits, (2**self.exponent_bits - 1) << self.mantissa_bits
        fractions = np.arange(1, 2**m) if self.has_inf else np.array([2**m - 1])
        positive = (top | fractions).astype(np.uint64) << np.uint64(self.shift)
        sign = np.uint64(1) << np.uint64(self.width - 1)
        return np.concatenate([positive, positive | sign]).astype(self.code_dtype)


def _ieee(name: str, exponent_bits: int, mantissa_bits: int, source: str) -> FloatFormat:
    return FloatFormat(name, exponent_bits, mantissa_bits, 2 ** (exponent_bits - 1) - 1, True, source)


FORMATS = {f.name: f for f in [
    _ieee("fp32", 8, 23, "IEEE 754-2019 binary32 (section 3.6, table 3.5)"),
    _ieee("tf32", 8, 10, "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), 'TF32'"),
    _ieee("fp16", 5, 10, "IEEE 754-2019 binary16 (section 3.6, table 3.5)"),
    _ieee("bf16", 8, 7, "Kalamkar et al. 2019, 'A Study of BFLOAT16 for Deep Learning Training'"),
    FloatFormat("fp8_e4m3", 4, 3, 7, False, "Micikevicius et al. 2022, 'FP8 Formats for Deep Learning', section 3 "
                "and table 1; OCP 8-bit Floating Point Specification (OFP8) v1.0, E4M3"),
    _ieee("fp8_e5m2", 5, 2, "Micikevicius et al. 2022, table 1; OCP OFP8 v1.0, E5M2"),
]}


def format_of(fmt) -> FloatFormat:
    """A FloatFormat by aisys.dtypes name ("fp16", "bf16", "fp8_e4m3", ...) or torch's ("float8_e4m3fn", ...)."""
    if isinstance(fmt, FloatFormat):
        return fmt
    from .dtypes import ALIASES

    name = ALIASES.get(fmt, fmt) if isinstance(fmt, str) else fmt
    return FORMATS[one_of("fmt", name, tuple(FORMATS))]


def _values(values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "fiub":
        raise ValueError(f"values must be an array of real numbers (float64 or float32), got {array.dtype}")
    with np.errstate(invalid="ignore"):  # a float32 NaN converts to a float64 NaN, which is all encode needs
        return array.astype(np.float64)


def encode(values, fmt, rounding: str = "nearest_even", saturate: bool = False) -> np.ndarray:
    """The codes of `values` in format `fmt` (unsigned integers of its width), rounded once in `rounding`."""
    f = format_of(fmt)
    one_of("rounding", rounding, ROUNDINGS)
    if not isinstance(saturate, (bool, np.bool_)):
        raise ValueError(f"saturate must be True or False, got {saturate!r}")
    x = _values(values)
    m, emin = f.mantissa_bits, f.emin

    negative = np.signbit(x)
    nan, inf = np.isnan(x), np.isinf(x)
    a = np.where(nan | inf, 0.0, np.abs(x))
    _, k = np.frexp(a)  # a = fraction x 2^k with the fraction in [0.5, 1): a's binade is 2^(k-1)
    e = np.where(a == 0, emin, np.maximum(k - 1, emin)).astype(np.int64)
    scaled = np.ldexp(a, m - e)  # exact (a power-of-two scaling): below 2^(m+1), integer where a is representable
    n = np.floor(scaled)
    rest = scaled - n  # exact
    if rounding == "nearest_even":
        n += (rest > 0.5) | ((rest == 0.5) & (np.fmod(n, 2) == 1))
    elif rounding == "nearest_away":
        n += rest >= 0.5
    magnitude = np.ldexp(n, e - m)  # the rounded |x|, or inf in float64 far beyond every format's range

    codes = (e - emin) * 2**m + n.astype(np.int64)  # exponent field and fraction together; a carry moves E up
    top = int(np.ldexp(f.max_finite, m - f.emax)) + (f.emax - emin) * 2**m  # the largest finite code
    infinity = (2**f.exponent_bits - 1) << m if f.has_inf else f.quiet_nan >> f.shift  # E4M3: NaN instead
    overflow = magnitude > f.max_finite
    to_max = saturate or rounding == "toward_zero"  # IEEE 754-2019 7.4: rounding toward zero never overflows to inf
    codes = np.where(overflow, top if to_max else infinity, codes)
    codes = np.where(inf, top if saturate else infinity, codes)
    codes = np.where(nan, f.quiet_nan >> f.shift, codes)
    codes = (codes.astype(np.uint64) << np.uint64(f.shift)) | (negative.astype(np.uint64) << np.uint64(f.width - 1))
    return codes.astype(f.code_dtype)


def _codes(codes, f: FloatFormat) -> np.ndarray:
    array = np.asarray(codes)
    if array.dtype.kind not in "iu":
        raise ValueError(f"codes must be an array of integers (the {f.name} bit patterns, {f.code_dtype.__name__}), "
                         f"got {array.dtype}")
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= 2**f.width):
        raise ValueError(f"codes must lie in [0, 2**{f.width}) for {f.name}")
    if f.shift and np.any(array & (2**f.shift - 1)):
        raise ValueError(f"codes for {f.name} must have their low {f.shift} bits zero (FP32 patterns of TF32 values)")
    return array


def decode(codes, fmt) -> np.ndarray:
    """The float64 values of `codes` in format `fmt` (inf and NaN where the code says, with their sign)."""
    f = format_of(fmt)
    c = _codes(codes, f)
    m = f.mantissa_bits
    negative = (c >> (f.width - 1)) & 1
    field = (c >> (f.shift + m)) & (2**f.exponent_bits - 1)
    fraction = (c >> f.shift) & (2**m - 1)
    normal = field > 0
    value = np.ldexp(np.where(normal, fraction + 2**m, fraction).astype(np.float64),
                     np.where(normal, field, 1) - f.bias - m)
    top = field == 2**f.exponent_bits - 1
    if f.has_inf:
        value = np.where(top, np.where(fraction == 0, np.inf, np.nan), value)
    else:
        value = np.where(top & (fraction == 2**m - 1), np.nan, value)
    return np.copysign(value, np.where(negative == 1, -1.0, 1.0))


def all_codes(fmt) -> np.ndarray:
    """Every code of an 8- or 16-bit format, ascending."""
    f = format_of(fmt)
    if f.width > 16:
        raise ValueError(f"fmt must be an 8- or 16-bit format to list every code; {f.name} has {f.width} bits")
    return np.arange(2**f.width, dtype=np.int64).astype(f.code_dtype)


def finite_values(fmt) -> np.ndarray:
    """Every finite value of an 8- or 16-bit format, ascending, -0 and +0 both present."""
    values = decode(all_codes(fmt), fmt)
    values = values[np.isfinite(values)]
    return values[np.lexsort((~np.signbit(values), values))]


def midpoints(fmt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(midpoints, below, above): every tie between neighbouring finite values of an 8- or 16-bit format, both
    signs, with the neighbours on either side; past the largest value, the tie with the next binade's first step
    (464 in E4M3, 65520 in FP16), whose `above` is inf (the value a format without its exponent range cannot hold)."""
    f = format_of(fmt)
    values = finite_values(fmt)
    positive = values[values >= 0][1:]  # +0 then the positive values; drop one zero so each gap appears once
    low = np.concatenate([[0.0], positive])
    step_past_max = np.ldexp(1.0, f.emax - f.mantissa_bits)
    high = np.concatenate([positive, [f.max_finite + step_past_max]])
    mids = (low + high) / 2  # exact: one more bit than the format's
    high = np.where(high > f.max_finite, np.inf, high)
    return (np.concatenate([mids, -mids]), np.concatenate([low, -low]), np.concatenate([high, -high]))
