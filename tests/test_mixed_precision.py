"""The mixed-precision reference: rounding bit for bit against torch and exact arithmetic, the dot-product model,
the error predictions against measurement, and clear errors on nonsense."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from aisys import mixed_precision as mp

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}


def float32_bits(*patterns) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def exactly_rounded(value, dtype: str) -> float:
    """The nearest value of `dtype` to `value` (a float or a Fraction), ties to even, by exact rational arithmetic."""
    if isinstance(value, float) and not math.isfinite(value) or value == 0:
        return float(value)
    fmt = mp.FORMATS[dtype]
    magnitude = abs(Fraction(value))
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1  # now 2^exponent <= magnitude < 2^(exponent + 1)
    emin = 2 - 2 ** (fmt.exponent_bits - 1)
    quantum = Fraction(2) ** (max(exponent, emin) - fmt.mantissa_bits)  # fixed below the normal range
    rounded = round(magnitude / quantum) * quantum  # round() on a Fraction is half to even
    result = math.inf if rounded > fmt.largest else float(rounded)
    return -result if value < 0 else result


def same_values(got, expected) -> bool:
    """Equal element by element, NaN matching NaN, and -0 told apart from +0."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag
        got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    both_nan = np.isnan(got) & np.isnan(expected)
    same = (got == expected) & (np.signbit(got) == np.signbit(expected))
    return bool(np.all(both_nan | same))


EDGE_BITS = [
    0x00000000, 0x80000000,  # +-0
    0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x007F8000, 0x00800000,  # subnormals, ties among them
    0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  # 1, ties to even down and up, either side of a tie
    0x3F7FFFFF, 0x3F7F8000, 0xBF7FFFFF,  # round up across an exponent boundary
    0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF,  # largest bf16, below and at the overflow tie, fp32 max
    0x7F800000, 0xFF800000,  # +-inf
    0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFF800001, 0xFFFFFFFF,  # NaNs, payloads in the dropped bits
    0x477FE000, 0x477FEFFF, 0x477FF000,  # fp16: the largest value, below and at the overflow tie
    0x33800000, 0x33000000, 0x33400000, 0x33000001,  # fp16: smallest subnormal, the tie below it, either side
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_round_to_matches_torch_bit_for_bit_on_float32(dtype):
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)  # every exponent, NaN and inf too
    x = np.concatenate([float32_bits(*EDGE_BITS), random_bits.view(np.float32),
                        rng.standard_normal(50_000).astype(np.float32)])
    expected = torch.from_numpy(x).to(TORCH[dtype]).float().numpy()
    got = mp.round_to(x, dtype)
    assert got.dtype == np.float32
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


@pytest.mark.parametrize("dtype", mp.ROUNDED)
def test_round_to_is_the_exact_value_rounded_once_for_float32_and_float64(dtype):
    rng = np.random.default_rng(1)
    scale = mp.FORMATS[dtype]
    float32 = np.concatenate([float32_bits(*EDGE_BITS), (rng.standard_normal(300) * 2.0 ** rng.integers(-140, 120, 300))
                              .astype(np.float32)])
    ties = np.array([1 + 2.0 ** -scale.precision + 2.0 ** -40, 1 + 2.0 ** -scale.precision - 2.0 ** -40,
                     -(1 + 3 * 2.0 ** -scale.precision + 2.0 ** -45), scale.largest * (1 + 2.0 ** -scale.precision)])
    float64 = np.concatenate([rng.standard_normal(300) * 2.0 ** rng.integers(-160, 130, 300), ties])
    for x in (float32, float64):
        got = mp.round_to(x, dtype)
        assert got.dtype == x.dtype
        assert same_values(got, [exactly_rounded(float(v), dtype) for v in x])


def test_float64_input_is_rounded_once_where_torch_rounds_twice():
    x = 1 + 2.0 ** -8 + 2.0 ** -40  # just above halfway between the bf16 values 1 and 1 + 2^-7
    assert mp.round_to(x, "bf16") == 1 + 2.0 ** -7
    assert torch.tensor(x, dtype=torch.float64).to(torch.bfloat16).item() == 1.0  # through float32: a false tie


def test_round_to_keeps_shape_and_scalars_and_takes_float16_and_integers():
    assert mp.round_to(np.zeros((2, 3), np.float32), "bf16").shape == (2, 3)
    assert isinstance(mp.round_to(0.1, "fp16"), np.float64)
    assert mp.round_to(np.float16(0.1), "fp32").dtype == np.float32
    assert mp.round_to(257, "bf16") == 256.0  # 257 is a tie between 256 and 258: the even significand wins
    assert mp.round_to([2049, 2051], "fp16").tolist() == [2048.0, 2052.0]


def test_tf32_keeps_ten_fraction_bits():
    x = float32_bits(0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF)  # ties down and up, either side of a tie
    assert mp.round_to(x, "tf32").view(np.uint32).tolist() == [0x3F800000, 0x3F804000, 0x3F802000, 0x3F800000]


def test_formats_table():
    assert {name: (f.exponent_bits, f.mantissa_bits) for name, f in mp.FORMATS.items()} == {
        "fp64": (11, 52), "fp32": (8, 23), "tf32": (8, 10), "bf16": (8, 7), "fp16": (5, 10),
        "fp8_e5m2": (5, 2), "fp8_e4m3": (4, 3)}
    assert mp.FORMATS["fp16"].largest == 65504 and mp.FORMATS["fp8_e4m3"].largest == 448
    assert mp.FORMATS["fp8_e5m2"].largest == 57344
    assert mp.FORMATS["bf16"].largest == float(torch.finfo(torch.bfloat16).max)
    assert mp.FORMATS["fp32"].largest == float(np.finfo(np.float32).max)
    assert mp.FORMATS["fp16"].smallest_subnormal == 2.0 ** -24 and mp.FORMATS["fp16"].smallest_normal == 2.0 ** -14
    assert mp.FORMATS["bf16"].smallest_normal == float(torch.finfo(torch.bfloat16).tiny)
    assert mp.FORMATS["tf32"].bits == 19


def test_unit_roundoff_and_stagnation():
    assert {d: mp.unit_roundoff(d) for d in mp.ROUNDED} == {"fp32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8,
                                                            "fp16": 2.0**-11}
    assert {d: mp.stagnation(d) for d in mp.ROUNDED} == {"fp32": 2**24, "tf32": 2048, "bf16": 256, "fp16": 2048}
    assert mp.unit_roundoff("float16") == mp.unit_roundoff("fp16")  # torch's names work too


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
def test_stagnation_is_where_counting_by_ones_stops(dtype):
    counts = np.arange(1, 2**12, dtype=np.float64)
    stuck = counts[mp.round_to(counts + 1, dtype) == counts]
    assert stuck[0] == mp.stagnation(dtype)
    assert mp.dot(np.ones(3000), np.ones(3000), dtype, dtype) == mp.stagnation(dtype)


def test_stagnation_in_fp32():
    n = mp.stagnation("fp32")
    assert mp.round_to(float(n) + 1, "fp32") == n and mp.round_to(float(n) - 1 + 1, "fp32") == n


def test_the_seeds_lost_update_and_its_tie():
    assert mp.lost_update(2.0**-3, 2.0**-14, "fp16")  # exactly halfway: the even neighbour is 2^-3
    assert mp.lost_update(2.0**-3, 2.0**-14 * 1e-3, "fp16")  # times a learning rate: lost, and more so
    assert not mp.lost_update(2.0**-3, 2.0**-14, "fp32")  # FP32 master weights keep it
    assert not mp.lost_update(2.0**-3 + 2.0**-13, 2.0**-14, "fp16")  # from an odd significand the tie goes up
    assert mp.lost_update(2.0**-3, -2.0**-15, "fp16")  # below a power of two the spacing halves: a tie again
    assert not mp.lost_update(2.0**-3, -2.0**-15 - 2.0**-20, "fp16")


def exact_model_dot(a, b, storage, accumulate, order):
    """The same model in exact rational arithmetic: every product and sum exact, then rounded."""
    def rnd(x: Fraction) -> Fraction:
        return Fraction(exactly_rounded(x, accumulate))

    terms = [rnd(Fraction(exactly_rounded(float(x), storage)) * Fraction(exactly_rounded(float(y), storage)))
             for x, y in zip(a, b)]
    if order == "sequential":
        total = terms[0]
        for term in terms[1:]:
            total = rnd(total + term)
        return float(total)
    while len(terms) > 1:
        terms = [rnd(x + y) for x, y in zip(terms[0::2], terms[1::2])] + terms[len(terms) // 2 * 2:]
    return float(terms[0])


@pytest.mark.parametrize("order", mp.ORDERS)
@pytest.mark.parametrize("storage", mp.ROUNDED)
@pytest.mark.parametrize("accumulate", mp.ROUNDED)
def test_dot_is_the_model_computed_exactly(storage, accumulate, order):
    rng = np.random.default_rng([mp.ROUNDED.index(storage), mp.ROUNDED.index(accumulate)])
    for K in (1, 2, 7, 64):
        a, b = rng.standard_normal(K) * 8, rng.random(K)
        assert mp.dot(a, b, storage, accumulate, order) == exact_model_dot(a, b, storage, accumulate, order)


def test_dot_in_fp32_and_fp16_is_numpys_arithmetic_in_those_types():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(500), rng.standard_normal(500)
    for dtype, name in ((np.float32, "fp32"), (np.float16, "fp16")):
        total = dtype(0)
        for x, y in zip(a.astype(dtype), b.astype(dtype)):
            total = dtype(total + dtype(x * y))
        assert mp.dot(a, b, name, name) == float(total)


def test_products_of_16_bit_inputs_are_exact_in_fp32():
    rng = np.random.default_rng(3)
    for storage in ("fp16", "bf16", "tf32"):
        products = mp._exact_products(rng.standard_normal(10_000), rng.standard_normal(10_000), storage)
        assert np.array_equal(mp.round_to(products, "fp32"), products)
    assert not np.array_equal(mp.round_to(mp._exact_products(rng.random(100), rng.random(100), "fp32"), "fp32"),
                              mp._exact_products(rng.random(100), rng.random(100), "fp32"))


def test_pairwise_adds_neighbours_level_by_level():
    # bf16 values near 256 lie 2 apart, so 256 + 1 is a tie that rounds back to 256: sequentially every 1 is lost,
    # pairwise (256 + 1) -> 256 and (1 + 1) = 2, then 256 + 2 = 258.
    values = [256.0, 1.0, 1.0, 1.0]
    assert mp.rounded_sum(values, "bf16") == 256.0
    assert mp.rounded_sum(values, "bf16", "pairwise") == 258.0
    assert mp.rounded_sum(values + [1.0], "bf16", "pairwise") == 260.0  # the odd one out joins at the last level
    assert mp.rounded_sum([3.0], "fp16", "pairwise") == 3.0


def test_fp16_accumulation_overflows_where_fp32_does_not():
    a = np.full(4, 300.0)  # products 90000 > 65504, the largest fp16 value
    assert mp.dot(a, a, "fp16", "fp16") == math.inf
    assert mp.dot(a, a, "fp16", "fp32") == 4 * 300.0**2


def test_roundings_and_error_bound():
    assert [mp.roundings(K, "pairwise") for K in (1, 2, 3, 4, 5, 1024, 1025)] == [1, 2, 3, 3, 4, 11, 12]
    assert mp.roundings(1000) == 1000
    u = 2.0**-11
    assert mp.error_bound(1000, "fp16") == pytest.approx(1000 * u / (1 - 1000 * u), rel=1e-15)
    assert mp.error_bound(1024, "fp16", "pairwise") == pytest.approx(11 * u / (1 - 11 * u), rel=1e-15)
    assert mp.error_bound(2048, "fp16") == math.inf and mp.error_bound(2047, "fp16") < math.inf
    assert mp.error_bound(10, "fp64") == pytest.approx(10 * 2.0**-53)


@pytest.mark.parametrize("accumulate", ["fp16", "bf16", "fp32"])
def test_error_bound_holds_and_equal_terms_come_near_it(accumulate):
    rng = np.random.default_rng(4)
    u = mp.unit_roundoff(accumulate)
    for order in mp.ORDERS:
        for K in (10, 100, 200):
            a, b = rng.standard_normal(K), rng.standard_normal(K)
            exact = math.fsum(mp._exact_products(a, b, accumulate))
            error = abs(mp.dot(a, b, accumulate, accumulate, order) - exact)
            assert error <= mp.error_bound(K, accumulate, order) * np.abs(mp._exact_products(a, b, accumulate)).sum()
    # 1, then terms just over half the spacing after 1: each addition rounds up by nearly half a spacing
    K = 100
    terms = np.full(K, u * (1 + 2 * u))
    terms[0] = 1
    exact = math.fsum(terms)
    relative = abs(mp.rounded_sum(terms, accumulate) - exact) / exact
    assert 0.9 * K * u / (1 + K * u) < relative <= mp.error_bound(K, accumulate)


@pytest.mark.parametrize("accumulate, storage", [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp16")])
@pytest.mark.parametrize("order", mp.ORDERS)
def test_typical_error_predicts_random_data_within_a_small_factor(accumulate, storage, order):
    Ks = [16, 128, 1024]
    measured = mp.measured_errors(Ks, storage, accumulate, order, "random", trials=128, seed=5)
    predicted = np.array([mp.typical_error(K, accumulate, order) for K in Ks])
    assert np.all((measured > 0.1 * predicted) & (measured < predicted))


def test_growth_exponents():
    Ks = 2 ** np.arange(4, 13)
    assert mp.growth_exponent(Ks, 3 * np.sqrt(Ks)) == pytest.approx(0.5)
    assert mp.growth_exponent(Ks, Ks * 1e-3) == pytest.approx(1.0)
    sequential = mp.measured_errors(Ks, "fp16", "fp32", "sequential", "random", trials=64, seed=6)
    assert mp.growth_exponent(Ks, sequential) == pytest.approx(0.5, abs=0.15)
    pairwise = mp.measured_errors(Ks, "fp16", "fp32", "pairwise", "random", trials=64, seed=6)
    assert mp.growth_exponent(Ks, pairwise) < 0.25


def test_positive_data_in_low_precision_stagnates():
    Ks = [256, 4096]
    fp16, fp32 = (mp.measured_errors(Ks, "fp16", acc, "sequential", "positive", trials=16) for acc in ("fp16", "fp32"))
    assert fp16[1] > 30 * fp16[0]  # far faster than sqrt(K): terms fall below half the sum's spacing
    assert fp32[1] < 8 * fp32[0]


def test_measured_errors_are_reproducible():
    first = mp.measured_errors([8, 64], "bf16", "bf16", trials=8, seed=7)
    assert np.array_equal(first, mp.measured_errors([8, 64], "bf16", "bf16", trials=8, seed=7))


@pytest.mark.parametrize("call, error, words", [
    (lambda: mp.round_to([1.0], "fp8_e4m3"), ValueError, "dtype must be one of 'fp32', 'tf32', 'bf16', 'fp16'"),
    (lambda: mp.round_to([1.0], "float17"), ValueError, "dtype must be one of"),
    (lambda: mp.round_to([1.0], None), ValueError, "dtype must be one of"),
    (lambda: mp.round_to(["1.0"], "bf16"), TypeError, "x must hold real numbers"),
    (lambda: mp.round_to([True], "bf16"), TypeError, "x must hold real numbers"),
    (lambda: mp.round_to([1j], "bf16"), TypeError, "x must hold real numbers"),
    (lambda: mp.unit_roundoff("int8"), ValueError, "dtype must be one of"),
    (lambda: mp.stagnation("fp128"), ValueError, "dtype must be one of"),
    (lambda: mp.lost_update("0.125", 1.0, "fp16"), TypeError, "w must be a real number"),
    (lambda: mp.lost_update(0.125, None, "fp16"), TypeError, "update must be a real number"),
    (lambda: mp.lost_update(0.125, 1.0, "fp8_e5m2"), ValueError, "dtype must be one of"),
    (lambda: mp.dot([], [], "fp16", "fp32"), ValueError, "a must be a 1-D array of length K >= 1"),
    (lambda: mp.dot(np.ones((2, 2)), np.ones(4), "fp16", "fp32"), ValueError, "a must be a 1-D array"),
    (lambda: mp.dot(np.ones(3), np.ones(4), "fp16", "fp32"), ValueError, "a and b must have the same length K, got 3"),
    (lambda: mp.dot(np.ones(3), "abc", "fp16", "fp32"), TypeError, "b must hold real numbers"),
    (lambda: mp.dot(np.ones(3), np.ones(3), "int8", "fp32"), ValueError, "storage must be one of"),
    (lambda: mp.dot(np.ones(3), np.ones(3), "fp16", "fp64"), ValueError, "accumulate must be one of"),
    (lambda: mp.dot(np.ones(3), np.ones(3), "fp16", "fp32", "tree"), ValueError, "order must be one of"),
    (lambda: mp.rounded_sum([], "fp16"), ValueError, "values must be a 1-D array of length K >= 1"),
    (lambda: mp.roundings(0), ValueError, "K must be an integer >= 1"),
    (lambda: mp.roundings(2.5), ValueError, "K must be an integer >= 1"),
    (lambda: mp.roundings(True), ValueError, "K must be an integer >= 1"),
    (lambda: mp.error_bound(10, "fp17"), ValueError, "accumulate must be one of"),
    (lambda: mp.typical_error(10, "fp16", "random"), ValueError, "order must be one of"),
    (lambda: mp.measured_errors([0, 8], "fp16", "fp16"), ValueError, "Ks[] must be an integer >= 1"),
    (lambda: mp.measured_errors([8], "fp16", "fp16", data="normal"), ValueError, "data must be one of"),
    (lambda: mp.measured_errors([8], "fp16", "fp16", trials=0), ValueError, "trials must be an integer >= 1"),
    (lambda: mp.growth_exponent([1, 2], [0.0, 1.0]), ValueError, "errors must be finite and > 0"),
    (lambda: mp.growth_exponent([1, 2, 3], [1.0, 2.0]), ValueError, "same length >= 2"),
])
def test_bad_input_is_refused_with_the_argument_named(call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value)


def test_epsilon_and_fp8_limits_agree_with_torch():
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        assert 2 * mp.FORMATS[name].unit_roundoff == torch.finfo(dtype).eps
        assert mp.FORMATS[name].smallest_normal == torch.finfo(dtype).tiny
    for name, dtype in (("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")):
        if hasattr(torch, dtype):
            assert mp.FORMATS[name].largest == torch.finfo(getattr(torch, dtype)).max


def test_mixed_precision_adam_keeps_16_bytes_per_parameter():
    assert mp.training_bytes_per_parameter() == 16  # ZeRO (Rajbhandari et al., SC 2020), section 3.1
    assert mp.training_bytes_per_parameter(mp.ADAM_MIXED_PRECISION_STATES[:2]) == 4  # the 16-bit weights and grads
