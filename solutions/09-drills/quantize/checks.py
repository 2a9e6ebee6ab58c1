"""Checks: int8 affine quantization: quantize, dequantize and choose_params, per tensor and per channel.

Each function has its own check, with two small visible cases. Hidden cases add the edges an interviewer
probes. quantize: exact halves (round half to even), codes past the range (clamp, not wrap), the symmetric
range's -127, per-channel parameters along either axis, an int zero point, an empty tensor. dequantize:
the extreme codes against the extreme zero points (255 apart), per channel. choose_params: all zeros,
all-positive and all-negative data, a channel of zeros, a zero point at an exact half, a negative axis,
one element. Then a property check each: inputs drawn by hypothesis, the first failing case shrunk.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview import quantization
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import assert_close, assert_format

TOLERANCE = (1e-6, 0.0)  # scales and dequantized values; codes and zero points are exact
EXAMPLES = 25  # per property check: three checks, and the explicit cases already hold every known mistake
SCALES = st.sampled_from([0.25, 0.5, 1.0, 0.1, 0.03]).map(np.float32).map(float)  # a float32's value, as a float


def _case(x, scale, zero_point, symmetric=False) -> dict:
    return {"x": np.asarray(x, dtype=np.float64), "scale": np.asarray(scale, dtype=np.float32),
            "zero_point": np.asarray(zero_point, dtype=np.int32), "symmetric": symmetric}


@st.composite
def QUANTIZE_CASES(draw):
    """Eighths up to 150 against scales down to 0.03: exact halves and codes far past the range."""
    symmetric = draw(st.booleans())
    x = draw(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=6),
                        elements=st.integers(-1200, 1200).map(lambda n: n / 8)))
    return {"x": x, "scale": draw(SCALES), "zero_point": 0 if symmetric else draw(st.integers(-128, 127)),
            "symmetric": symmetric}


DEQUANTIZE_CASES = st.fixed_dictionaries({
    "q": hnp.arrays(np.int8, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6)),
    "scale": SCALES, "zero_point": st.integers(-128, 127)})


@st.composite
def PARAMS_CASES(draw):
    """Quarters from -10 to 10: zeros, one-signed rows and columns, and exact ratios come up often."""
    x = draw(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=5),
                        elements=st.integers(-40, 40).map(lambda n: n / 4)))
    axis = draw(st.sampled_from([None, *range(-x.ndim, x.ndim)]))
    return {"x": x, "mode": draw(st.sampled_from(["symmetric", "asymmetric"])), "axis": axis}


def _params_compare(got, expected, case):
    """(scale float32 within the tolerance, zero_point int32 exactly), each named in a message."""
    if isinstance(got, list) and len(got) == 2:
        assert_format(got[0], "float32", where="scale")
        assert_close(got[0], expected[0], rtol=TOLERANCE[0], atol=TOLERANCE[1], where="scale")
        assert_format(got[1], "int32", where="zero_point")
        assert_close(got[1], expected[1], rtol=0, atol=0, where="zero_point")
    assert_close(got, expected, rtol=TOLERANCE[0], atol=TOLERANCE[1], where="(scale, zero_point)")


@check(points=2)
def quantize(student, rng, hidden):
    """quantize(x, scale, zero_point, symmetric): int8 codes, x / scale rounded half to even, plus the zero point,
    clamped to [-128, 127] ([-127, 127] symmetric)."""
    cases = [_case([0.25, 0.75, -0.25, 2.0, 100.0], 0.5, 0), _case([[0.0, 1.0], [2.0, 3.1]], 0.0125, -128)]
    if hidden:
        halves = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 63.75])  # / 0.5: 0.5, 1.5, 2.5, ... 127.5
        weights = rng.standard_normal((3, 5))
        cases = [_case(halves, 0.5, 0), _case(halves, 0.5, -3, symmetric=True),
                 _case([-1000.0, -65.0, 64.0, 1000.0], 0.5, 0),  # past the range: saturate, never wrap
                 _case([-1000.0, -63.75, -63.5, 1000.0], 0.5, 0, symmetric=True),  # symmetric: -127 at most
                 _case(weights, np.abs(weights).max(axis=1, keepdims=True) / 127, np.zeros((3, 1)), True),
                 _case(weights, [[0.01, 0.02, 0.005, 0.1, 0.03]], [[-128, 0, 5, 127, -7]]),  # per column
                 {**_case(weights, 0.02, 0), "zero_point": int(rng.integers(-128, 128))},  # an int zero point
                 _case(np.zeros((0, 3)), 0.1, 4),  # empty
                 _case(rng.standard_normal((4, 6, 8)) * 3, 0.02, int(rng.integers(-20, 20)))]
    compare_cases(student, "quantize", cases, quantization.quantize, returns="array", hidden=hidden,
                  tolerance=(0, 0), dtype="int8")
    if hidden:
        compare_property(student, "quantize", QUANTIZE_CASES(), quantization.quantize, rng=rng, returns="array",
                         hidden=hidden, tolerance=(0, 0), dtype="int8", examples=EXAMPLES)


@check(points=1)
def dequantize(student, rng, hidden):
    """dequantize(q, scale, zero_point): (q - zero_point) * scale as float32, the subtraction wider than int8."""
    cases = [{"q": np.array([0, 10, -10, 127], np.int8), "scale": np.float32(0.5), "zero_point": np.int32(0)},
             {"q": np.array([[-128, 0], [5, 127]], np.int8), "scale": np.float32(0.1), "zero_point": np.int32(-128)}]
    if hidden:
        extremes = np.array([-128, -127, -1, 0, 1, 126, 127], np.int8)
        cases = [{"q": extremes, "scale": 0.1, "zero_point": -128},  # 127 - (-128) = 255: wider than int8
                 {"q": extremes, "scale": 0.1, "zero_point": 127},  # -128 - 127 = -255
                 {"q": rng.integers(-128, 128, (3, 4)).astype(np.int8),
                  "scale": (rng.uniform(0.001, 0.1, (3, 1))).astype(np.float32),
                  "zero_point": rng.integers(-128, 128, (3, 1)).astype(np.int32)},  # per row
                 {"q": np.zeros(0, np.int8), "scale": 0.5, "zero_point": 3}]
    compare_cases(student, "dequantize", cases, quantization.dequantize, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float32")
    if hidden:
        compare_property(student, "dequantize", DEQUANTIZE_CASES, quantization.dequantize, rng=rng,
                         returns="array", hidden=hidden, tolerance=TOLERANCE, dtype="float32", examples=EXAMPLES)


@check(points=2)
def choose_params(student, rng, hidden):
    """choose_params(x, mode, axis): (scale float32, zero_point int32) per tensor or per index along axis, the
    asymmetric range widened to hold 0, scale 1 where the values are all 0."""
    data = np.random.default_rng(0).standard_normal((3, 4))
    cases = [{"x": data, "mode": "symmetric", "axis": None}, {"x": data, "mode": "asymmetric", "axis": 0}]
    if hidden:
        weights = rng.standard_normal((4, 6))
        with_zero_row = np.vstack([weights[:2], np.zeros((1, 6)), weights[2:]])
        cases = [{"x": np.zeros((2, 3)), "mode": "symmetric", "axis": None},  # all zeros: scale 1
                 {"x": np.zeros((2, 3)), "mode": "asymmetric", "axis": None},  # and zero point -128
                 {"x": np.abs(weights) + 0.5, "mode": "asymmetric", "axis": None},  # all positive: lo is 0
                 {"x": -np.abs(weights) - 0.5, "mode": "asymmetric", "axis": 1},  # all negative: hi is 0
                 {"x": with_zero_row, "mode": "symmetric", "axis": 0},  # a channel of zeros
                 {"x": with_zero_row, "mode": "asymmetric", "axis": 0},
                 {"x": np.array([-3.0, 0.0, 507.0]), "mode": "asymmetric", "axis": None},  # lo / scale = -1.5
                 {"x": rng.standard_normal((2, 3, 4)), "mode": "asymmetric", "axis": -1},  # a negative axis
                 {"x": np.array([[-0.75]]), "mode": "asymmetric", "axis": 1},  # one element
                 {"x": rng.standard_normal((5, 7)) * 4, "mode": "symmetric", "axis": 1}]
    compare_cases(student, "choose_params", cases, quantization.choose_params, returns="list", hidden=hidden,
                  compare=_params_compare)
    if hidden:
        compare_property(student, "choose_params", PARAMS_CASES(), quantization.choose_params, rng=rng,
                         returns="list", hidden=hidden, compare=_params_compare, examples=EXAMPLES)
