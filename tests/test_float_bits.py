"""aisys.float_bits against ml_dtypes (0.6.0, pinned: the reference implementation of BF16 and the FP8 formats),
numpy (FP16, FP32) and the bit tricks NVIDIA's TF32 conversion is defined by: exhaustive over every 8- and 16-bit
code and every tie between neighbours."""

import ml_dtypes
import numpy as np
import pytest

from aisys import float_bits as fb
from aisys.mixed_precision import FORMATS as MIXED

REFERENCE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
             "fp8_e5m2": ml_dtypes.float8_e5m2}
SMALL = tuple(REFERENCE)


def _cast(values, name):
    """ml_dtypes' (numpy's for FP16) round-to-nearest-even cast, as codes."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(values, np.float64).astype(REFERENCE[name]).view(fb.FORMATS[name].code_dtype)


def _same(a, b):
    """Equal values, NaN where NaN, and the same sign (so -0 is not 0)."""
    return (np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.signbit(a), np.signbit(b))
            and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]))


@pytest.mark.parametrize("name", SMALL)
def test_decode_every_code(name):
    codes = fb.all_codes(name)
    with np.errstate(invalid="ignore"):
        expected = codes.view(REFERENCE[name]).astype(np.float64)
    got = fb.decode(codes, name)
    assert got.dtype == np.float64
    assert _same(got, expected)
    assert np.array_equal(np.flatnonzero(np.isnan(got)), np.sort(fb.FORMATS[name].nan_codes()).astype(np.int64))


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("rounding", fb.ROUNDINGS)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_every_value(name, rounding, saturate):
    """Every finite value encodes to its own code in every mode (both zeros included)."""
    codes = fb.all_codes(name)
    values = fb.decode(codes, name)
    finite = np.isfinite(values)
    got = fb.encode(values[finite], name, rounding, saturate)
    assert got.dtype == fb.FORMATS[name].code_dtype
    assert np.array_equal(got, codes[finite])


@pytest.mark.parametrize("name", SMALL)
def test_nearest_even_ties_and_neighbours_match_ml_dtypes(name):
    mids, _, _ = fb.midpoints(name)
    assert np.array_equal(fb.encode(mids, name), _cast(mids, name))
    # just off each tie, in float64: both sides are exact in float32 too, so ml_dtypes' route through float32
    # (below) does not matter here
    for off in (np.nextafter(mids, 0), np.nextafter(mids, np.where(mids > 0, np.inf, -np.inf))):
        exact32 = off.astype(np.float32).astype(np.float64) == off
        assert np.array_equal(fb.encode(off[exact32], name), _cast(off[exact32], name))


@pytest.mark.parametrize("name", SMALL)
def test_ties_in_the_other_modes(name):
    f = fb.FORMATS[name]
    mids, below, above = fb.midpoints(name)
    overflow_code = fb.encode(np.copysign(np.inf, mids), name)  # inf, or NaN in E4M3
    away = fb.encode(mids, name, "nearest_away")
    expected = np.where(np.isinf(above), overflow_code, fb.encode(np.where(np.isinf(above), 0, above), name))
    assert np.array_equal(away, expected)
    assert np.array_equal(fb.encode(mids, name, "toward_zero"), fb.encode(below, name))
    # saturation: the tie past the largest value becomes the largest value in every mode
    beyond = np.isinf(above)
    for rounding in fb.ROUNDINGS:
        sat = fb.decode(fb.encode(mids[beyond], name, rounding, saturate=True), name)
        assert np.array_equal(sat, np.copysign(f.max_finite, mids[beyond]))


def test_e4m3_overflow():
    e4m3 = "fp8_e4m3"
    above = np.nextafter(448.0, np.inf)
    assert list(fb.encode([448, above, 464, 465, 480, np.inf, -465], e4m3)) == [0x7E, 0x7E, 0x7E, 0x7F, 0x7F, 0x7F,
                                                                                0xFF]
    assert list(fb.encode([464, 465, 1e30, np.inf, -np.inf, np.nan], e4m3, saturate=True)) == [0x7E, 0x7E, 0x7E, 0x7E,
                                                                                                0xFE, 0x7F]
    assert list(fb.encode([465, 1e30], e4m3, "toward_zero")) == [0x7E, 0x7E]  # toward zero never overflows
    assert list(fb.encode([464], e4m3, "nearest_away")) == [0x7F]  # the tie goes to 480: NaN
    # What ml_dtypes does (the reference the exercise's checks are compared with): round to nearest even, no
    # saturation, NaN for overflow and for inf (there is no inf), from float64 and from float32 alike.
    for dtype in (np.float64, np.float32):
        x = np.array([464, 465, np.inf, -np.inf], dtype)
        with np.errstate(invalid="ignore"):
            assert list(x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)) == [0x7E, 0x7F, 0x7F, 0xFF]


def test_e5m2_and_fp16_overflow_to_inf():
    assert list(fb.encode([57344, 61439, 61440, -61440], "fp8_e5m2")) == [0x7B, 0x7B, 0x7C, 0xFC]
    assert list(_cast([57344, 61439, 61440], "fp8_e5m2")) == [0x7B, 0x7B, 0x7C]  # ml_dtypes agrees: no saturation
    assert list(fb.encode([65519, 65520, np.inf], "fp16")) == [0x7BFF, 0x7C00, 0x7C00]
    assert list(fb.encode([65520, np.inf], "fp16", saturate=True)) == [0x7BFF, 0x7BFF]


def test_nan_and_negative_zero():
    for name, f in fb.FORMATS.items():
        got = fb.encode([np.nan, -np.nan, -0.0, 0.0, -f.smallest_subnormal / 4], name, saturate=True)
        sign = 1 << (f.width - 1)
        assert list(got) == [f.quiet_nan, f.quiet_nan | sign, sign, 0, sign], name
        if name != "fp32":  # 2 x (2^23 - 1) codes there
            assert np.all(np.isnan(fb.decode(f.nan_codes(), name)))
    # ml_dtypes keeps the sign and quiets the NaN, whatever its payload
    payloads = np.array([0x7F800001, 0xFFA00000], np.uint32).view(np.float32)
    assert list(payloads.astype(ml_dtypes.bfloat16).view(np.uint16)) == [0x7FC0, 0xFFC0]
    assert list(fb.encode(payloads, "bf16")) == [0x7FC0, 0xFFC0]


def test_subnormals_and_the_carry_into_the_exponent():
    f = fb.FORMATS["fp8_e4m3"]
    assert list(fb.encode([f.smallest_subnormal, 7 * f.smallest_subnormal, 7.5 * f.smallest_subnormal], f)) == [
        0x01, 0x07, 0x08]  # 7.5 ticks: a tie that rounds up into the smallest normal
    assert list(fb.encode([1.90625, 1.9375], f)) == [0x3F, 0x40]  # 1.875 + half a step: a tie, up to 2 (a carry)
    assert list(fb.encode([f.smallest_subnormal / 2, f.smallest_subnormal * 0.75], f)) == [0x00, 0x01]


def test_fp32_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000) * np.exp2(rng.uniform(-160, 140, 200_000))  # subnormals to overflow
    x = np.concatenate([x, [np.inf, -np.inf, -0.0, 0.0, 3.4028235677973366e38, 3.4028235e38 * 1.0000001]])
    with np.errstate(over="ignore"):
        expected = x.astype(np.float32).view(np.uint32)
    assert np.array_equal(fb.encode(x, "fp32"), expected)
    codes = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    assert _same(fb.decode(codes, "fp32"), codes.view(np.float32).astype(np.float64))
    # truncation: never larger in magnitude, and the next code up is larger than |x|
    finite = np.isfinite(x) & (np.abs(x) < 3e38)
    tz = fb.encode(x[finite], "fp32", "toward_zero")
    assert np.all(np.abs(tz.view(np.float32)) <= np.abs(x[finite]))
    assert np.all(np.abs((tz + np.uint32(1)).view(np.float32).astype(np.float64)) > np.abs(x[finite]))


def test_tf32_is_fp32_with_ten_fraction_bits():
    """NVIDIA's PTX ISA, cvt: cvt.rna.tf32.f32 rounds an FP32 to TF32 to nearest, ties away from zero (.rna), and
    keeps it in a 32-bit register with the low 13 bits zero. As bits: add half a step (bit 12) and clear the low 13;
    ties to even adds 0xFFF plus the kept last bit."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    bits = bits[np.isfinite(bits.view(np.float32)) & (bits & 0x7FFFFFFF < 0x7F7FF000)]  # no overflow, no NaN
    ties = (bits & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    for b in (bits, ties):
        x = b.view(np.float32)
        away = (b + np.uint32(0x1000)) & ~np.uint32(0x1FFF)
        even = (b + np.uint32(0xFFF) + ((b >> np.uint32(13)) & np.uint32(1))) & ~np.uint32(0x1FFF)
        assert np.array_equal(fb.encode(x, "tf32", "nearest_away"), away)
        assert np.array_equal(fb.encode(x, "tf32"), even)
        assert np.array_equal(fb.encode(x, "tf32", "toward_zero"), b & ~np.uint32(0x1FFF))
        assert np.array_equal(fb.decode(away, "tf32"), away.view(np.float32).astype(np.float64))


def test_ml_dtypes_rounds_float64_twice():
    """ml_dtypes converts float64 to BF16 and FP8 through float32: a float64 just above a BF16 tie becomes the tie
    in float32, then rounds to even, down. encode rounds the float64 once, up, as IEEE 754 asks."""
    x = 1 + 2.0**-8 + 2.0**-40
    assert _cast([x], "bf16")[0] == 0x3F80
    assert fb.encode([x], "bf16")[0] == 0x3F81
    assert fb.encode(np.float32(x), "bf16") == 0x3F80  # from the float32 it is a tie: to even


def test_properties_agree_with_mixed_precision():
    for name, f in fb.FORMATS.items():
        assert (f.exponent_bits, f.mantissa_bits, f.max_finite) == (MIXED[name].exponent_bits,
                                                                      MIXED[name].mantissa_bits, MIXED[name].largest)
        assert f.smallest_subnormal == MIXED[name].smallest_subnormal
    for name in SMALL:
        info = ml_dtypes.finfo(REFERENCE[name])
        f = fb.FORMATS[name]
        assert (f.max_finite, f.epsilon, f.smallest_normal, f.smallest_subnormal) == (
            float(info.max), float(info.eps), float(info.smallest_normal), float(info.smallest_subnormal))


def test_refusals():
    with pytest.raises(ValueError, match="rounding"):
        fb.encode([1.0], "bf16", "nearest")
    with pytest.raises(ValueError, match="fmt"):
        fb.encode([1.0], "fp4")
    with pytest.raises(ValueError, match="values"):
        fb.encode(["1"], "bf16")
    with pytest.raises(ValueError, match="codes"):
        fb.decode([256], "fp8_e4m3")
    with pytest.raises(ValueError, match="codes"):
        fb.decode([1.0], "bf16")
    with pytest.raises(ValueError, match="low 13 bits"):
        fb.decode([0x3F800001], "tf32")
    assert fb.format_of("float8_e4m3fn") is fb.FORMATS["fp8_e4m3"]
