"""Checks: decode and encode of FP32, TF32, FP16, BF16, FP8 E4M3 and E5M2, bit for bit against aisys.float_bits,
which tests/test_float_bits.py holds to ml_dtypes (0.6.0, pinned) on every 8- and 16-bit code.

Codes are compared exactly, as unsigned integers of the format's width (the dtype is checked); decoded values
exactly, with NaN where NaN and the sign of zero. Visible cases are a few named values per format; the hidden ones
are exhaustive for the 8- and 16-bit formats: every code decoded; every finite value and every tie between
neighbours (both signs, and the tie past the largest value) encoded in each rounding mode, with and without
saturation; values off the ties by one float64 step, and random ones between neighbours; FP32 and TF32 from
random float64 values with numpy's float32 cast and TF32's bit tricks as witnesses. Each hidden call of up to
65,536 values may take 1 CPU second (`BUDGET`): numpy on whole arrays takes milliseconds, numpy called value by value
seconds.
"""

import functools
import hashlib
import re

import numpy as np

from aisys import float_bits as fb
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_format, shown, unredacted

SMALL = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
ALL = ("fp32", "tf32", *SMALL)
# CPU seconds a hidden call of up to 65,536 values may take, inputs and result included. Measured where these checks
# were written: the solution 10-15 ms a call; numpy called on one value at a time 35 us a value, over 2 s, which
# fails; a pure-Python loop (math.frexp, math.ldexp) 40-90 ms, which passes: no budget can tell it from slow
# vectorised code, so only per-value numpy calls, the usual way a loop is written here, are refused.
BUDGET = 1.0
SLOW = ("work on whole arrays (np.frexp, np.ldexp, np.where, shifts and masks): numpy called on one value at a time "
        "is far too slow for the hidden checks, which encode every value of every format")


def _dtype(case) -> str:
    return np.dtype(fb.FORMATS[case["fmt"]].code_dtype).name


def _hex(code, fmt) -> str:
    return f"0x{int(code):0{fb.FORMATS[fmt].width // 4}X}"


def _encode_compare(got, expected, case):
    """Codes exact, in the stated dtype; the message names the first wrong one."""
    fmt = case["fmt"]
    if not isinstance(got, np.ndarray):
        raise CheckFailure(f"expected an array of codes, got {type(got).__name__}")
    assert_format(got, _dtype(case), where="codes")
    if got.shape != expected.shape:
        raise CheckFailure(f"codes: expected shape {expected.shape}, got {got.shape}")
    wrong = np.flatnonzero(got.ravel() != expected.ravel())
    if wrong.size:
        i = wrong[0]
        x = np.asarray(case["values"], np.float64).ravel()[i]
        raise CheckFailure(
            f"{wrong.size} of {got.size} codes differ; the first: "
            + unredacted(f"encode({x!r}) gave {_hex(got.ravel()[i], fmt)}, expected {_hex(expected.ravel()[i], fmt)}",
                         "(values not shown: a hidden case)"))


def _decode_compare(got, expected, case):
    """float64 values exact, NaN where NaN, -0 kept."""
    if not isinstance(got, np.ndarray):
        raise CheckFailure(f"expected an array of float64 values, got {type(got).__name__}")
    assert_format(got, "float64", where="values")
    if got.shape != expected.shape:
        raise CheckFailure(f"values: expected shape {expected.shape}, got {got.shape}")
    g, e = got.ravel(), expected.ravel()
    nan_e = np.isnan(e)
    wrong = (np.isnan(g) != nan_e) | (~nan_e & ((g != e) | (np.signbit(g) != np.signbit(e))))
    if wrong.any():
        i = np.flatnonzero(wrong)[0]
        code = np.asarray(case["codes"]).ravel()[i]
        raise CheckFailure(f"{int(wrong.sum())} of {g.size} values differ; the first: "
                           + unredacted(f"code {_hex(code, case['fmt'])} gave {g[i]!r}, expected {e[i]!r}",
                                        "(codes not shown: a hidden case)"))


_EXPECTED: dict = {}


def _reference_encode(values, fmt, rounding="nearest_even", saturate=False):
    """fb.encode, remembered: the exhaustive cases are the same on every seed and for every answer graded."""
    values = np.asarray(values)
    key = (hashlib.blake2b(values.tobytes(), digest_size=16).digest(), values.dtype.str, values.shape, fmt, rounding,
           saturate)
    if key not in _EXPECTED:
        _EXPECTED[key] = fb.encode(values, fmt, rounding, saturate)
    return _EXPECTED[key]


def _encode_cases(student, cases, hidden, hint=None):
    compare_cases(student, "encode", cases, _reference_encode, returns="array", hidden=hidden, compare=_encode_compare,
                  hint=hint, budget=BUDGET if hidden else None, slow=SLOW, call=_named)


def _named(case) -> str:
    values = np.asarray(case["values"])
    extra = "".join(f", {k}={case[k]!r}" for k in ("rounding", "saturate") if k in case)
    return f"encode({values.size} values, {case['fmt']!r}{extra})"


def _f64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


@functools.lru_cache(maxsize=None)
def _finite(fmt) -> np.ndarray:
    return fb.finite_values(fmt)


@functools.lru_cache(maxsize=None)
def _ties(fmt) -> np.ndarray:
    return fb.midpoints(fmt)[0]


def _modes():
    return [(r, s) for r in fb.ROUNDINGS for s in (False, True)]


@check(points=3)
def decode(student, rng, hidden):
    """decode(codes, fmt): float64 values, subnormals, -0, inf and NaN; every 8- and 16-bit code when hidden."""
    cases = [{"codes": np.array([0x3F800000, 0xC0000000, 0x00000001, 0x7F7FFFFF, 0x7F800000, 0x80000000],
                                np.uint32), "fmt": "fp32"},
             {"codes": np.array([0x3F802000, 0x00002000, 0xFF800000], np.uint32), "fmt": "tf32"},
             {"codes": np.array([0x3C00, 0x7BFF, 0x0001, 0x0400, 0xFC00, 0x8000], np.uint16), "fmt": "fp16"},
             {"codes": np.array([0x3F80, 0x7F7F, 0x0001, 0xC2F7], np.uint16), "fmt": "bf16"},
             {"codes": np.array([0x38, 0x7E, 0x7F, 0x78, 0x01, 0x80, 0x08], np.uint8), "fmt": "fp8_e4m3"},
             {"codes": np.array([0x3C, 0x7B, 0x7C, 0x7D, 0x01, 0x80], np.uint8), "fmt": "fp8_e5m2"}]
    if hidden:
        cases = [{"codes": fb.all_codes(fmt), "fmt": fmt} for fmt in ("fp8_e4m3", "fp8_e5m2", "bf16", "fp16")]
        for fmt, low in (("fp32", 0), ("tf32", 13)):
            bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
            cases.append({"codes": (bits >> np.uint32(low) << np.uint32(low)).reshape(64, 64), "fmt": fmt})
    compare_cases(student, "decode", cases, fb.decode, returns="array", hidden=hidden, compare=_decode_compare,
                  budget=BUDGET if hidden else None, slow=SLOW,
                  call=lambda case: f"decode({np.asarray(case['codes']).size} codes, {case['fmt']!r})")


@check(points=2)
def encode_exact(student, rng, hidden):
    """encode(value of a code) is that code, in every rounding mode, with and without saturation."""
    cases = [{"values": _f64([1.0, -2.0, 448.0, 0.015625, 0.001953125, 0.0, 240.0]), "fmt": "fp8_e4m3"},
             {"values": _f64([1.0, 57344.0, -(2.0**-16), 3.0]), "fmt": "fp8_e5m2",
              "rounding": "toward_zero"},
             {"values": _f64([1.0, 65504.0, 2.0**-24, -3.140625]), "fmt": "fp16", "rounding": "nearest_away",
              "saturate": True},
             {"values": _f64([1.0, 3.3895313892515355e38, 2.0**-133, -0.5]), "fmt": "bf16"}]
    if hidden:
        cases = [{"values": _finite(fmt), "fmt": fmt, "rounding": r, "saturate": s}
                 for fmt in ("fp8_e4m3", "fp8_e5m2") for r, s in _modes()]
        # 16-bit formats: each mode once, with saturation where encode_ties has none (the pairs alternate there)
        cases += [{"values": _finite(fmt), "fmt": fmt, "rounding": r, "saturate": r != "nearest_away"}
                  for fmt in ("bf16", "fp16") for r in fb.ROUNDINGS]
    _encode_cases(student, cases, hidden)


def _ties_hint(case, got, expected) -> str:
    rounding = case.get("rounding", "nearest_even")
    if rounding == "nearest_even":
        return "a tie goes to the neighbour whose last fraction bit is 0: not always up, not always away from zero"
    if rounding == "toward_zero":
        return "toward zero truncates the magnitude: a negative value goes up, toward zero, not down to -inf"
    return "ties away from zero: the neighbour of larger magnitude, for negative values too"


@check(points=3)
def encode_ties(student, rng, hidden):
    """Every tie between neighbouring values in each rounding mode (even, away, toward zero), both signs."""
    cases = [{"values": _f64([1.0625, 1.1875, -1.0625, -1.1875, 0.5 + 2.0**-5]), "fmt": "fp8_e4m3"},
             {"values": _f64([1.0625, 1.1875, -1.0625, -1.1875]), "fmt": "fp8_e4m3", "rounding": "nearest_away"},
             {"values": _f64([-1.0625, -1.1875, 1.1875]), "fmt": "fp8_e4m3", "rounding": "toward_zero"},
             {"values": _f64([1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 3 * 2.0**-8)]), "fmt": "bf16"}]
    if hidden:
        cases = [{"values": _ties(fmt), "fmt": fmt, "rounding": r, "saturate": s}
                 for fmt in ("fp8_e4m3", "fp8_e5m2") for r, s in _modes()]
        cases += [{"values": _ties(fmt), "fmt": fmt, "rounding": r, "saturate": r == "nearest_away"}
                  for fmt in ("bf16", "fp16") for r in fb.ROUNDINGS]
    _encode_cases(student, cases, hidden, hint=_ties_hint)


@check(points=2)
def encode_between(student, rng, hidden):
    """Values that are not ties: one float64 step either side of every tie, and random values between neighbours."""
    cases = [{"values": _f64([1.06, 1.07, -1.06, -1.07, 3.3, 300.0]), "fmt": "fp8_e4m3"},
             {"values": _f64([1.06, -1.07, 300.0]), "fmt": "fp8_e4m3", "rounding": "toward_zero"},
             {"values": _f64([0.1, -0.1, 1 / 3]), "fmt": "bf16", "rounding": "nearest_away"}]
    if hidden:
        cases = []
        for fmt in SMALL:
            ties = _ties(fmt)
            if fb.FORMATS[fmt].width == 8:  # both sides of every tie
                near = np.concatenate([np.nextafter(ties, 0), np.nextafter(ties, np.copysign(np.inf, ties))])
            else:  # one side of every tie, drawn: half as many values
                near = np.nextafter(ties, np.where(rng.random(ties.size) < 0.5, 0, np.copysign(np.inf, ties)))
            finite = _finite(fmt)
            lo = rng.integers(0, finite.size - 1, 4096)
            between = finite[lo] + rng.random(4096) * (finite[lo + 1] - finite[lo])
            cases += [{"values": near, "fmt": fmt}, {"values": near, "fmt": fmt, "rounding": "toward_zero"},
                      {"values": between, "fmt": fmt, "rounding": fb.ROUNDINGS[int(rng.integers(0, 3))]}]
    _encode_cases(student, cases, hidden, hint=_ties_hint)


@check(points=2)
def subnormals_and_zero(student, rng, hidden):
    """Subnormals encoded and decoded, values rounding to zero (+0 and -0), a subnormal rounding up to the smallest
    normal, -0 kept."""
    def tiny(fmt):
        f = fb.FORMATS[fmt]
        s = f.smallest_subnormal
        return _f64([s, -s, 3 * s, 0.0, -0.0, s / 4, -s / 4, s / 2, 1.5 * s, -1.5 * s,
                     f.smallest_normal - s / 2, f.smallest_normal - s, -f.smallest_normal + s / 4])
    cases = [{"values": tiny("fp8_e4m3"), "fmt": "fp8_e4m3"}, {"values": tiny("fp16"), "fmt": "fp16"}]
    if hidden:
        cases = [{"values": tiny(fmt), "fmt": fmt, "rounding": r} for fmt in ALL for r in fb.ROUNDINGS]
    _encode_cases(student, cases, hidden)


def _overflow_values(fmt):
    f = fb.FORMATS[fmt]
    step = np.ldexp(1.0, f.emax - f.mantissa_bits)  # the spacing of the top binade
    big = f.max_finite
    return _f64([big, -big, big + step / 2, big + step / 2 + step / 8, big + step / 4, big + step, -big - step,
                 big * 4, np.inf, -np.inf, 1e300])


@check(points=3)
def overflow_and_saturation(student, rng, hidden):
    """Around the largest value: E4M3 at 448 + a little, 464 (a tie: 448), 465 (NaN, or 448 saturated), inf; E5M2,
    FP16, BF16 and FP32 to inf or to their largest value; toward zero never overflows."""
    e4m3 = _f64([448.0, 448.5, 464.0, 465.0, 480.0, -465.0, np.inf, -np.inf])
    cases = [{"values": e4m3, "fmt": "fp8_e4m3"}, {"values": e4m3, "fmt": "fp8_e4m3", "saturate": True},
             {"values": _f64([57344.0, 61439.0, 61440.0, np.inf]), "fmt": "fp8_e5m2"},
             {"values": _f64([65504.0, 65519.0, 65520.0, -1e6]), "fmt": "fp16", "saturate": True}]
    if hidden:
        cases = [{"values": _overflow_values(fmt), "fmt": fmt, "rounding": r, "saturate": s}
                 for fmt in ALL for r, s in _modes()]
        cases.append({"values": _f64([464.0, 465.0, np.nextafter(448.0, np.inf), np.nextafter(464.0, 0)]),
                      "fmt": "fp8_e4m3"})

    def hint(case, got, expected):
        if case["fmt"] == "fp8_e4m3":
            return ("E4M3 has no inf: 448 is its largest value, S.1111.111 its only NaN, which is what overflow "
                    "gives without saturation (464 is a tie, to 448)")
        return "a value whose rounded magnitude exceeds the largest is inf (the largest with saturate or toward zero)"
    _encode_cases(student, cases, hidden, hint=hint)


@check(points=1)
def nan(student, rng, hidden):
    """Every NaN code decodes to NaN; NaN encodes to the quiet NaN with its sign, saturated or not."""
    nans = _f64([np.nan, -np.nan, 1.0])
    cases = [{"values": nans, "fmt": "fp8_e4m3", "saturate": True}, {"values": nans, "fmt": "bf16"}]
    if hidden:
        cases = [{"values": nans, "fmt": fmt, "rounding": r, "saturate": s} for fmt in ALL for r, s in _modes()]
    _encode_cases(student, cases, hidden)
    if hidden:
        decoded = [{"codes": fb.FORMATS[fmt].nan_codes(), "fmt": fmt} for fmt in ("tf32", *SMALL)]
        compare_cases(student, "decode", decoded, fb.decode, returns="array", hidden=hidden,
                      compare=_decode_compare, call=lambda case: f"decode(every NaN code of {case['fmt']!r})")


@check(points=2)
def fp32_and_tf32(student, rng, hidden):
    """FP32 and TF32 from float64: exactly representable, halfway, beyond range; TF32 ties away (cvt.rna); a float64
    just off a BF16 tie rounded once, not through float32."""
    fp32_max = float(np.finfo(np.float32).max)
    half_ulp = 2.0**-24
    cases = [{"values": _f64([1.0, 0.1, 1 + half_ulp, 1 + 3 * half_ulp, 3.5e38, 2.0**-149, 2.0**-151]),
              "fmt": "fp32"},
             {"values": _f64([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, 0.1]), "fmt": "tf32",
              "rounding": "nearest_away"},
             {"values": _f64([1 + 2.0**-8 + 2.0**-40, -(1 + 2.0**-8 + 2.0**-40)]), "fmt": "bf16"}]
    if hidden:
        x = rng.standard_normal(20000) * np.exp2(rng.uniform(-155, 130, 20000))
        exact = x.astype(np.float32).astype(np.float64)
        ulp = np.abs(np.spacing(exact.astype(np.float32)).astype(np.float64))
        halfway = exact + np.copysign(ulp / 2, exact)
        beyond = _f64([fp32_max + 2.0**103, fp32_max * 2, -1e39, 1e300, fp32_max + 2.0**103 - 2.0**60])
        tf32 = exact.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        tf32_ties = (tf32 | np.uint32(0x1000)).view(np.float32).astype(np.float64)
        off_bf16_ties = _ties("bf16") * (1 + 2.0**-40)
        cases = [{"values": exact, "fmt": "fp32"}, {"values": halfway, "fmt": "fp32"},
                 {"values": halfway, "fmt": "fp32", "rounding": "toward_zero"},
                 {"values": beyond, "fmt": "fp32"}, {"values": beyond, "fmt": "tf32", "saturate": True},
                 {"values": x, "fmt": "fp32", "rounding": "nearest_away"},
                 {"values": tf32_ties, "fmt": "tf32", "rounding": "nearest_away"},
                 {"values": tf32_ties, "fmt": "tf32"}, {"values": x, "fmt": "tf32", "rounding": "toward_zero"},
                 {"values": off_bf16_ties, "fmt": "bf16"}]

    def hint(case, got, expected):
        if case["fmt"] == "bf16":
            return "round the float64 once: through float32 it becomes a tie first, then rounds to even"
        if case["fmt"] == "tf32":
            return "TF32 is the FP32 pattern with its low 13 bits zero: 8 exponent bits, 10 fraction bits"
        return ""
    _encode_cases(student, cases, hidden, hint=hint)


@check(points=1)
def refused(student, rng, hidden):
    """An unknown rounding mode or format is a ValueError naming the argument (read through the notebook's refusal
    helper)."""
    for arguments, name in (({"values": np.ones(2), "fmt": "bf16", "rounding": "nearest"}, "rounding"),
                            ({"values": np.ones(2), "fmt": "fp8", "rounding": "nearest_even"}, "fmt"),
                            ({"values": np.ones(2), "fmt": "fp16", "rounding": "up"}, "rounding")):
        call = f"encode(values, fmt={arguments['fmt']!r}, rounding={arguments['rounding']!r})"
        got = student.call("refusal", **arguments, returns="any")
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError naming {name}")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it should "
                               f"raise ValueError naming {name}")
        if not re.search(rf"\b{name}\b", str(got[1])):
            raise CheckFailure(f"{call} raised ValueError, but its message should name the argument `{name}`"
                               + unredacted(f"; it says {got[1]!r}"))
