"""Checks: an exact int8 x int8 -> int32 product, and its requantization to int8 codes.

The answer key is aisys.quant.int8_gemm (int8_matmul without a zero point, requantize without a bias). Both
results are integers, compared exactly with their dtype. Hidden cases: int8_matmul on full-range codes at K = 4095
(rows and columns all 127, all -128 or alternating: sums such as 127 * 127 * 4095 are odd and past 2**24, so a
float32 sum cannot hold them; two products of -128 * -128 already pass int16; int8 products wrap), K = 1, one
element; requantize on exact halves of both signs and parities (with an odd zero point, which adding before
rounding would flip), values past both ends of the int8 range, distinct per-row and per-column scales on a
non-square matrix, scalar scales. Then a property check each: small inputs drawn by hypothesis, shrunk.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.quant import int8_gemm
from aisys_grader.checks import check, compare_cases, compare_property

EXACT = (0, 0)  # integers: any difference is wrong
EXAMPLES = 25  # per property check: the explicit cases already hold every known mistake


def _full_range(m: int, k: int, n: int):
    patterns = [np.full(k, 127), np.full(k, -128), np.where(np.arange(k) % 2, 127, -128)]
    a = np.stack([patterns[i % 3] for i in range(m)]).astype(np.int8)
    b = np.stack([patterns[(j + 1) % 3] for j in range(n)], axis=1).astype(np.int8)
    return {"a": a, "b": b}


def _matmul_reference(a, b):
    return int8_gemm.int8_matmul(a, b)


@st.composite
def MATMUL_CASES(draw):
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    codes = st.integers(-128, 127)
    return {"a": draw(hnp.arrays(np.int8, (m, k), elements=codes)),
            "b": draw(hnp.arrays(np.int8, (k, n), elements=codes))}


@check(points=2)
def int8_matmul(student, rng, hidden):
    """int8_matmul(a, b) is a @ b exactly, as int32, for full-range codes and long K."""
    cases = [{"a": np.array([[127, -128], [1, 2]], np.int8), "b": np.array([[127, 0, 1], [-128, 1, 1]], np.int8)},
             {"a": np.random.default_rng(4).integers(-128, 128, (3, 40)).astype(np.int8),
              "b": np.random.default_rng(5).integers(-128, 128, (40, 4)).astype(np.int8)}]
    if hidden:
        cases = [_full_range(3, 4095, 3),  # odd sums past 2**24
                 {"a": rng.integers(-128, 128, (4, 1)).astype(np.int8),
                  "b": rng.integers(-128, 128, (1, 5)).astype(np.int8)},  # K = 1
                 {"a": np.array([[-128]], np.int8), "b": np.array([[-128]], np.int8)},
                 {"a": rng.integers(-128, 128, (5, 2000)).astype(np.int8),
                  "b": rng.integers(-128, 128, (2000, 3)).astype(np.int8)}]
    compare_cases(student, "int8_matmul", cases, _matmul_reference, returns="array", hidden=hidden, tolerance=EXACT,
                  dtype="int32")
    if hidden:
        compare_property(student, "int8_matmul", MATMUL_CASES(), _matmul_reference, rng=rng, returns="array",
                         hidden=hidden, tolerance=EXACT, dtype="int32", examples=EXAMPLES)


def _rq(acc, a_scale, b_scale, out_scale, out_zero_point):
    return {"acc": np.asarray(acc, np.int32), "a_scale": np.asarray(a_scale, np.float32),
            "b_scale": np.asarray(b_scale, np.float32), "out_scale": np.float32(out_scale),
            "out_zero_point": int(out_zero_point)}


def _requantize_reference(acc, a_scale, b_scale, out_scale, out_zero_point):
    return int8_gemm.requantize(acc, a_scale, b_scale, out_scale, out_zero_point)


HALVES = np.array([[1, 3, 5, 7, 9], [-1, -3, -5, -7, -9]], np.int32)  # times 0.5: exact halves of both signs


@st.composite
def REQUANTIZE_CASES(draw):
    """Small accumulators against scales that are powers of two (exact halves come up often) or not."""
    m, n = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    scales = st.sampled_from([0.25, 0.5, 1.0, 2.0, 0.1, 0.03])
    return _rq(draw(hnp.arrays(np.int32, (m, n), elements=st.integers(-600, 600))),
               draw(hnp.arrays(np.float32, (m, 1), elements=scales)),
               draw(hnp.arrays(np.float32, (1, n), elements=scales)),
               draw(st.sampled_from([1.0, 2.0, 0.5])), draw(st.integers(-128, 127)))


@check(points=2)
def requantize(student, rng, hidden):
    """requantize rounds half to even in float64, adds the zero point after rounding, clamps, and keeps the
    per-row and per-column scales where they belong."""
    cases = [_rq([[32513, 0, 1], [-255, 2, 3]], [[0.01], [0.5]], [[1, 1, 1]], 2, 0),
             _rq([[100, -100, 7]], [[0.5]], [[1, 2, 0.25]], 1, -5)]
    if hidden:
        cases = [_rq(HALVES, 0.5, 1, 1, 0),  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2
                 _rq(HALVES, [[1], [1]], [[0.5] * 5], 1, 3),  # an odd zero point, after rounding
                 _rq(HALVES, 1, 1, 2, -1),  # the half from out_scale
                 _rq([[2**31 - 1, -2**31, 300, -300, 0]], 1, 1, 1, 5),  # saturate at both ends
                 _rq(rng.integers(-10**6, 10**6, (3, 5)), rng.uniform(1e-3, 1e-2, (3, 1)),
                     rng.uniform(1e-3, 1e-2, (1, 5)), 0.25, int(rng.integers(-20, 20))),  # 3 x 5, distinct scales
                 _rq(rng.integers(-10**5, 10**5, (4, 2)), 0.01, rng.uniform(1e-2, 1e-1, (1, 2)), 0.5, 0)]
    compare_cases(student, "requantize", cases, _requantize_reference, returns="array", hidden=hidden,
                  tolerance=EXACT, dtype="int8")
    if hidden:
        compare_property(student, "requantize", REQUANTIZE_CASES(), _requantize_reference, rng=rng,
                         returns="array", hidden=hidden, tolerance=EXACT, dtype="int8", examples=EXAMPLES)
