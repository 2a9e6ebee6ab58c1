"""Checks: an exact int8 x int8 -> int32 product, its requantization to int8 and dequantization to float32, in numpy
and fused into a Triton kernel's epilogue.

The answer key is aisys.quant.int8_gemm. Integer results (int32 sums, int8 codes) are compared exactly, with their
dtype. The deciding cases are deterministic, on every seed:

- int8_matmul: a full-range product at K = 4095 whose rows and columns are all 127, all -128 or alternating: its
  sums (127 * 127 * 4095 = 66048255, odd and past 2**24) cannot be held by a float32, pass int16 at the first
  steps, and every product of -128 * -128 wraps in int8; an activation zero point of -128 against codes of 127
  (a difference of 255, which int8 wraps to -1);
- int8_matmul_long_k: K at the int32 bound, accepted and exact (131071 products of -128 * -128 sum to 2147467264;
  with the zero point -128, 65793 differences of 255 times -128 to -2147483520), and one past it refused;
- requantize: exact halves of both signs and both parities (acc odd, a_scale * b_scale = 0.5), with an odd zero
  point (adding it before rounding flips the tie), codes past both ends of [-128, 127], distinct per-token and
  per-channel scales on a non-square matrix;
- the Triton kernel: the same full-range sums at K = 1041 (127 * 127 * 1041 = 16790289, odd and past 2**24) on 17 x 17
  (ragged against 16 x 16 tiles), and shapes ragged in M, N and K; every load past a tensor is an error in the
  interpreter (aisys.triton_interpreter), so a missing mask on K fails.
"""

import numpy as np

from aisys.quant import int8_gemm as reference
from aisys_grader.checks import check, compare_cases, raises_value_error

# float32 dequantization: the stated order is 3 or 4 float32 roundings (acc, two products, the bias); a student
# rounding in another order, or in float64 once, differs by at most about that many units of 2**-24 relative
# to the largest term, so 16 units of it leave room and still reject a scale off by one float32 step of 1e-6.
DEQUANT_ULPS = 16 * 2.0**-24


def _full_range(m: int, k: int, n: int):
    """Rows of A all 127, all -128, alternating; columns of B the same: every sum is +-127*127*K, 128*128*K or
    mixed, the largest an int8 GEMM can make."""
    patterns = [np.full(k, 127), np.full(k, -128), np.where(np.arange(k) % 2, 127, -128)]
    a = np.stack([patterns[i % 3] for i in range(m)]).astype(np.int8)
    b = np.stack([patterns[(j + 1) % 3] for j in range(n)], axis=1).astype(np.int8)
    return a, b


def _codes(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _mm(a, b, a_zero_point=0):
    return {"a": a, "b": b, "a_zero_point": a_zero_point}


@check(points=3)
def int8_matmul(student, rng, hidden):
    """int8_matmul(a, b, a_zero_point) is (a - a_zero_point) @ b exactly, as int32: full-range codes at K = 4095,
    K = 1, a per-token zero point against extreme codes."""
    cases = [_mm(np.array([[127, -128, 3]], np.int8), np.array([[127, 1], [-128, 1], [2, -1]], np.int8)),
             _mm(_codes(np.random.default_rng(5), 4, 9), _codes(np.random.default_rng(6), 9, 5), 3)]
    if hidden:
        extremes = np.full((4, 300), 127, np.int8)
        extremes[1] = -128
        cases = [_mm(*_full_range(3, 4095, 3)),  # sums past 2**24, odd: float32, int16 and int8 all fail
                 _mm(_codes(rng, 6, 4096), _codes(rng, 4096, 7)),
                 _mm(_codes(rng, 5, 1), _codes(rng, 1, 4)),  # K = 1
                 _mm(_codes(rng, 1, 50), _codes(rng, 50, 1)),
                 _mm(extremes, _codes(rng, 300, 5), np.array([[-128], [127], [0], [5]])),  # 127 - (-128) = 255
                 _mm(_codes(rng, 7, 33), _codes(rng, 33, 3), int(rng.integers(-128, 128)))]
    compare_cases(student, "int8_matmul", cases, reference.int8_matmul, returns="array", hidden=hidden,
                  tolerance=(0, 0), dtype="int32",
                  hint=lambda case, got, expected: "Cast the codes to int32 before multiplying (numpy multiplies "
                  "int8 by int8 in int8), accumulate in int32, not int16 or float32 (exact only below 2**24), and "
                  "subtract the zero point in int32: a_zero_point times the column sums of b.")


@check(points=1)
def int8_matmul_long_k(student, rng, hidden):
    """K at int32's bound (131071, or 65793 with a zero point) is exact; one past it raises ValueError."""
    bound, bound_zp = reference.MAX_K, reference.MAX_K_WITH_ZERO_POINT
    cases = [_mm(np.full((1, bound), -128, np.int8), np.full((bound, 1), -128, np.int8)),  # 2147467264
             _mm(np.full((1, bound_zp), 127, np.int8), np.full((bound_zp, 1), -128, np.int8), -128)]  # -2147483520
    compare_cases(student, "int8_matmul", cases, reference.int8_matmul, returns="array", hidden=hidden,
                  tolerance=(0, 0), dtype="int32",
                  hint=lambda case, got, expected: "At this K the sum is within int32: compute it exactly.")
    raises_value_error(student, "int8_matmul", "at this K, int8 products can sum past int32's largest value",
                       **_mm(np.full((1, bound + 1), -128, np.int8), np.full((bound + 1, 1), -128, np.int8)))
    raises_value_error(student, "int8_matmul",
                       "with a nonzero zero point the codes' differences reach twice an int8's size, "
                       "and at this K their products can sum past int32's largest value",
                       **_mm(np.zeros((1, bound_zp + 1), np.int8), np.zeros((bound_zp + 1, 1), np.int8), 1))


def _rq(acc, a_scale, b_scale, out_scale, out_zero_point, bias=None):
    return {"acc": np.asarray(acc, np.int32), "a_scale": np.asarray(a_scale, np.float32),
            "b_scale": np.asarray(b_scale, np.float32), "out_scale": np.float32(out_scale),
            "out_zero_point": int(out_zero_point), "bias": None if bias is None else np.asarray(bias, np.int32)}


def _ties():
    """acc odd in both signs, a_scale * b_scale = 0.5: every value is an exact half (-7.5 ... 7.5)."""
    return np.array([[1, 3, 5, 7, 9, 11, 13, 15], [-1, -3, -5, -7, -9, -11, -13, -15]], np.int32)


def _scales(rng, m, n):
    """Distinct per-token (m, 1) and per-channel (1, n) float32 scales."""
    return (rng.uniform(1e-3, 2e-2, (m, 1)).astype(np.float32), rng.uniform(1e-3, 2e-2, (1, n)).astype(np.float32))


@check(points=3)
def requantize(student, rng, hidden):
    """requantize gives int8 codes: float64, ties to even, zero point after rounding, clamped at both ends,
    per-token and per-channel scales where they belong."""
    acc = np.array([[5, -5, 7], [300, -300, 1]], np.int32)
    cases = [_rq(acc, [[0.5], [1.0]], [[1.0, 1.0, 0.25]], 1.0, 0),
             _rq(np.random.default_rng(7).integers(-20000, 20000, (3, 4)), *_scales(np.random.default_rng(8), 3, 4),
                 0.05, -10, np.array([100, -100, 0, 5]))]
    if hidden:
        sa, sb = _scales(rng, 5, 7)
        cases = [_rq(_ties(), 0.5, 1.0, 1.0, 0),  # halves: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2
                 _rq(_ties(), [[0.25], [0.25]], np.full((1, 8), 2.0), 1.0, 3),  # an odd zero point after rounding
                 _rq(_ties(), 1.0, 1.0, 2.0, -1),  # the half from dividing by out_scale
                 _rq([[2**31 - 1, -2**31, 1000, -1000, 0]], 1.0, 1.0, 1.0, 5),  # past both ends: clamp
                 _rq(rng.integers(-2**24, 2**24, (5, 7)), sa, sb, 0.5, int(rng.integers(-20, 20))),  # 5 x 7
                 _rq(rng.integers(-2**20, 2**20, (5, 7)), sa, sb, 0.1, 0, rng.integers(-2**16, 2**16, 7)),  # bias
                 _rq(rng.integers(-10**6, 10**6, (3, 2)), np.float32(0.003), sb[:, :2], 0.25, 7)]  # scalar a_scale
    compare_cases(student, "requantize", cases, reference.requantize, returns="array", hidden=hidden,
                  tolerance=(0, 0), dtype="int8",
                  hint=lambda case, got, expected: "Round half to even (np.round), add the zero point after "
                  "rounding, clamp to the int8 range before the cast, and keep a_scale (one per row) and "
                  "b_scale (one per column) where they broadcast.")


def _dq(acc, a_scale, b_scale, bias=None):
    return {"acc": np.asarray(acc, np.int32), "a_scale": np.asarray(a_scale, np.float32),
            "b_scale": np.asarray(b_scale, np.float32), "bias": None if bias is None else np.asarray(bias, np.float32)}


def _dequant_tolerance(case):
    """(0, DEQUANT_ULPS x the largest term): the bias may cancel the product, so relative to the terms' size."""
    terms = np.abs(case["acc"].astype(np.float64) * case["a_scale"] * case["b_scale"])
    largest = float(terms.max()) + (0.0 if case["bias"] is None else float(np.abs(case["bias"]).max()))
    return 0.0, DEQUANT_ULPS * largest


@check(points=1)
def dequantize(student, rng, hidden):
    """dequantize returns float32 acc * a_scale * b_scale + bias, the scales per token and per channel."""
    cases = [_dq([[5, -5, 7], [300, -300, 1]], [[0.5], [1.0]], [[1.0, 1.0, 0.25]]),
             _dq(np.random.default_rng(9).integers(-10**5, 10**5, (3, 4)), *_scales(np.random.default_rng(10), 3, 4),
                 [0.5, -0.5, 0.0, 2.0])]
    if hidden:
        sa, sb = _scales(rng, 6, 3)
        cases = [_dq(rng.integers(-2**30, 2**30, (6, 3)), sa, sb),  # past 2**24: float32(acc) rounds
                 _dq(rng.integers(-10**5, 10**5, (6, 3)), sa, sb, rng.standard_normal(3)),
                 _dq(rng.integers(-10**5, 10**5, (2, 3)), np.float32(0.01), sb),
                 _dq(rng.integers(-10**5, 10**5, (6, 1)), sa, np.float32(0.02))]
    compare_cases(student, "dequantize", cases, reference.dequantize_acc, returns="array", hidden=hidden,
                  tolerance=_dequant_tolerance, dtype="float32",
                  hint=lambda case, got, expected: "Return float32: acc.astype(np.float32) * a_scale * b_scale, "
                  "a_scale one per row and b_scale one per column, then the bias per column.")


# ---------------------------------------------------------------- the Triton kernel


def _gemm_reference(a, b, output="int32", a_scale=None, b_scale=None, out_scale=None, out_zero_point=0, bias=None):
    acc = reference.int8_matmul(a, b)
    if output == "int32":
        return acc
    if output == "int8":
        return reference.requantize(acc, a_scale, b_scale, out_scale, out_zero_point, bias)
    return reference.dequantize_acc(acc, a_scale, b_scale, bias)


def _gemm_dtype(case):
    return case.get("output", "int32")


def _gemm_tolerance(case):
    if case.get("output") == "float32":
        acc = reference.int8_matmul(case["a"], case["b"])
        return _dequant_tolerance({"acc": acc, "a_scale": case["a_scale"], "b_scale": case["b_scale"],
                                   "bias": case.get("bias")})
    return 0, 0


def _gemm_hint(case, got, expected):
    return ("Accumulate in int32 (tl.zeros(..., dtype=tl.int32), tl.dot(a, b, acc, out_dtype=tl.int32)), mask the "
            "loads on K as well as M and N, load a_scale at offs_m (rows) and b_scale at offs_n (columns), round "
            "with round_half_even, add the zero point, clamp to the int8 range.")


def _gemm(student, cases, hidden):
    compare_cases(student, "int8_gemm", cases, _gemm_reference, returns="array", hidden=hidden,
                  tolerance=_gemm_tolerance, dtype=_gemm_dtype, hint=_gemm_hint)


@check(points=3)
def triton_int8_gemm(student, rng, hidden):
    """int8_gemm(a, b) returns the int32 product exactly: full-range sums past 2**24, ragged M, N and K."""
    cases = [{"a": _codes(np.random.default_rng(1), 20, 100), "b": _codes(np.random.default_rng(2), 100, 30)},
             {"a": np.array([[-128]], np.int8), "b": np.array([[-128]], np.int8)}]
    if hidden:
        a, b = _full_range(17, 1041, 17)  # 127 * 127 * 1041 = 16790289: odd, past 2**24
        cases = [{"a": a, "b": b},
                 {"a": _codes(rng, 33, 70), "b": _codes(rng, 70, 17)},
                 {"a": _codes(rng, 16, 64), "b": _codes(rng, 64, 16)},  # multiples of the tile
                 {"a": _codes(rng, 5, 1), "b": _codes(rng, 1, 40)},  # K = 1
                 {"a": _codes(rng, int(rng.integers(2, 40)), 33), "b": _codes(rng, 33, int(rng.integers(2, 40)))}]
    _gemm(student, cases, hidden)


def _epilogue_case(rng, m, k, n, output, out_scale=None, out_zero_point=0, bias=False, a=None, b=None, scales=None):
    a = _codes(rng, m, k) if a is None else a
    b = _codes(rng, k, n) if b is None else b
    sa, sb = _scales(rng, m, n) if scales is None else scales
    case = {"a": a, "b": b, "output": output, "a_scale": sa, "b_scale": sb}
    if output == "int8":
        case.update(out_scale=np.float32(out_scale), out_zero_point=out_zero_point)
        if bias:
            case["bias"] = rng.integers(-2000, 2000, n).astype(np.int32)
    elif bias:
        case["bias"] = rng.standard_normal(n).astype(np.float32)
    return case


@check(points=2)
def triton_epilogue(student, rng, hidden):
    """int8_gemm's fused epilogue: output "int8" equals requantize bit for bit (ties, clamps, per-token and
    per-channel scales), output "float32" equals dequantize."""
    fixed = np.random.default_rng(3)
    odd = np.array([[1], [3], [5], [-1], [-3], [7]], np.int8)  # with K = 1 and b = 1 or -1: acc is odd
    signs = np.array([[1, -1, 1, -1, 1]], np.int8)
    halves = (np.full((6, 1), 0.5, np.float32), np.ones((1, 5), np.float32))  # every value an exact half
    cases = [_epilogue_case(fixed, 6, 1, 5, "int8", 1.0, 0, a=odd, b=signs, scales=halves),
             _epilogue_case(fixed, 20, 70, 30, "int8", 0.05, -3, bias=True),
             _epilogue_case(fixed, 20, 70, 30, "float32", bias=True)]
    if hidden:
        cases = [_epilogue_case(rng, 6, 1, 5, "int8", 1.0, 3, a=odd, b=signs, scales=halves),  # odd zero point
                 _epilogue_case(rng, 6, 1, 5, "int8", 2.0, 0, a=odd, b=signs,  # halves from out_scale
                                scales=(np.ones((6, 1), np.float32), np.ones((1, 5), np.float32))),
                 _epilogue_case(rng, 19, 40, 33, "int8", 1e-3, 5),  # far past both ends: clamp
                 _epilogue_case(rng, 35, 50, 9, "int8", 0.2, int(rng.integers(-30, 30)), bias=True),  # M > N
                 _epilogue_case(rng, 7, 33, 40, "float32"),  # N > M
                 _epilogue_case(rng, 18, 65, 17, "float32", bias=True)]
    _gemm(student, cases, hidden)
