"""Checks: float32 -> BF16 patterns (uint16, exact) against aisys.float_bits.encode, and BF16 -> float32 against
aisys.float_bits.decode. rounds_to_nearest_even: ties with an even and an odd kept part, just off the ties, values
whose rounding carries into the exponent, random values (a hypothesis property over float32 bit patterns when
hidden). specials: the largest float32 and the BF16 overflow tie (inf), inf, -0, subnormals, NaN with payloads in
the kept and in the dropped bits, both signs. widens: every BF16 pattern when hidden.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys import float_bits as fb
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure, assert_format, unredacted

EXACT = (0, 0)  # bit patterns: one right answer


def _f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _bf16(x):
    return fb.encode(np.asarray(x, dtype=np.float32), "bf16")


def _float32(codes):
    return fb.decode(codes, "bf16").astype(np.float32)


def _hint(case, got, expected) -> str:
    return ("round to nearest even: add 0x7FFF plus the lowest kept bit, then shift; a tie (dropped bits exactly "
            "0x8000) goes up only when the kept part is odd")


def _encode(student, cases, hidden):
    compare_cases(student, "to_bf16_bits", cases, _bf16, returns="array", hidden=hidden, tolerance=EXACT,
                  dtype="uint16", hint=_hint)


# float32 patterns of numbers, inf included (NaN is the specials check's): rounding is a property of the bits
NUMBERS = st.integers(0, 0x7F800000) | st.integers(0x80000000, 0xFF800000)
PATTERNS = st.fixed_dictionaries({"x": hnp.arrays(np.uint32, st.integers(1, 12), elements=NUMBERS)
                                  .map(lambda b: b.view(np.float32))})


@check(points=2)
def rounds_to_nearest_even(student, rng, hidden):
    """to_bf16_bits: ties to even (kept part even: down; odd: up), off-tie values, a carry into the exponent."""
    cases = [{"x": _f32([0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F808001, 0x3F807FFF])},
             {"x": _f32([0x3F7FFFFF, 0x40490FDB, 0x3DCCCCCD]).reshape(3, 1)}]
    if hidden:
        kept = rng.integers(0, 0x7F7F, 64, dtype=np.uint64) << np.uint64(16)
        ties = kept | np.uint64(0x8000)
        cases = [{"x": _f32([0x3F808000, 0x3F818000, 0xC0008000, 0xC0018000])},
                 {"x": _f32(np.concatenate([ties, ties | np.uint64(1 << 31)]))},
                 {"x": _f32(np.concatenate([ties + np.uint64(1), ties - np.uint64(1)]))},
                 {"x": _f32([0x3F7FFFFF, 0x3FFFFFFF, 0x00FFFFFF, 0xBF7FFF80, 0x3F7F8000])},  # carries
                 {"x": np.zeros(0, np.float32)},
                 {"x": (rng.standard_normal((5, 7)) * 10.0 ** rng.integers(-30, 30, (5, 7))).astype(np.float32)}]
    _encode(student, cases, hidden)
    if hidden:
        compare_property(student, "to_bf16_bits", PATTERNS, _bf16, rng=rng, returns="array", hidden=hidden,
                         tolerance=EXACT, dtype="uint16", examples=30)


@check(points=2)
def specials(student, rng, hidden):
    """Overflow to inf, inf, -0, subnormals, and NaN (any payload, either sign) to the quiet NaN with its sign."""
    cases = [{"x": _f32([0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x00018000])},
             {"x": _f32([0x7FC00000, 0x7F800001, 0xFFFFFFFF])}]
    if hidden:
        cases = [{"x": _f32([0x7F800001, 0x7F80FFFF, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFA00000, 0x7FA00000])},
                 {"x": _f32([0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0xFF7F8000, 0x7F800000, 0xFF800000])},
                 {"x": _f32([0x80000000, 0x00000000, 0x80000001, 0x00008000, 0x00018000, 0x8000FFFF, 0x007FFFFF])}]
    _encode(student, cases, hidden)


def _widen_compare(got, expected, case):
    if not isinstance(got, np.ndarray):
        raise CheckFailure(f"expected a float32 array, got {type(got).__name__}")
    assert_format(got, "float32", where="values")
    if got.shape != expected.shape:
        raise CheckFailure(f"values: expected shape {expected.shape}, got {got.shape}")
    nan = np.isnan(expected)
    wrong = (np.isnan(got) != nan) | (~nan & ((got != expected) | (np.signbit(got) != np.signbit(expected))))
    if wrong.any():
        i = np.flatnonzero(wrong.ravel())[0]
        code = int(np.asarray(case["codes"]).ravel()[i])
        raise CheckFailure(f"{int(wrong.sum())} of {got.size} values differ; the first: "
                           + unredacted(f"0x{code:04X} gave {got.ravel()[i]!r}, expected {expected.ravel()[i]!r}",
                                        "(codes not shown: a hidden case)"))


@check(points=1)
def widens(student, rng, hidden):
    """bf16_to_float32: the exact float32 value of every BF16 pattern (NaN for NaN patterns), dtype float32."""
    cases = [{"codes": np.array([0x3F80, 0xC049, 0x0001, 0x8000, 0x7F80, 0x7FC0], np.uint16)}]
    if hidden:
        cases = [{"codes": fb.all_codes("bf16")}, {"codes": fb.all_codes("bf16")[::-97].reshape(-1, 1)}]
    compare_cases(student, "bf16_to_float32", cases, _float32, returns="array", hidden=hidden,
                  compare=_widen_compare)
