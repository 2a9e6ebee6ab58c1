"""Checks: affine quantization at every granularity, bit for bit against aisys.quant.affine.

choose_qparams: every granularity (tensor, channel, token, group) in both modes at 8 and 4 bits, on 2-d and 3-d
arrays; the edges: an all-zero tensor (scale 2**-126, no NaN), all-positive data (the asymmetric range widened to
hold 0), a tiny-magnitude tensor whose scale would fall below float32's normal range, a huge-magnitude one, and a
weight with one outlier channel. The scale must be float32 and the zero point int32, both exact: the rules fix them
bit for bit. group_size_refused: a group that does not divide the last dimension is a ValueError naming group_size.
quantize: exact halves (round half to even), codes past the range (clip, never wrap), the symmetric range's
-127 (never -128), 4-bit ranges, per-block parameters. dequantize: the extreme codes against the extreme zero points
(255 apart), per block, as float32.
"""

import re

import numpy as np

from aisys.quant import affine
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown, unredacted

EXACT = (0, 0)  # codes, zero points, float32 scales and float32 products are all determined bit for bit


def _params_compare(got, expected, case):
    """(scale float32, zero_point int32), each exact and named in the message."""
    if not (isinstance(got, list) and len(got) == 2):
        raise CheckFailure(f"expected a pair (scale, zero_point), got {describe(got)}")
    for value, want, name, dtype in ((got[0], expected[0], "scale", "float32"),
                                     (got[1], expected[1], "zero_point", "int32")):
        assert_format(value, dtype, where=name)
        assert_close(value, want, rtol=0, atol=0, where=name)


def _params_hint(case, got, expected) -> str:
    if case.get("granularity") in ("channel", "group", "token"):
        return ("the parameters have x's number of dimensions and shape x.shape // block: per channel (S0, 1, ...), "
                "per token (S0, ..., S[-2], 1), per group (..., S[-1] // group_size)")
    return ""


def _x(rng, shape, spread=1.0):
    return rng.standard_normal(shape) * spread


@check(points=3)
def choose_qparams(student, rng, hidden):
    """choose_qparams(x, bits, symmetric, granularity, group_size): (scale float32, zero_point int32) per block,
    exactly as the rules fix them."""
    data = np.random.default_rng(0).standard_normal((4, 6))
    cases = [{"x": data, "bits": 8, "symmetric": True, "granularity": "tensor"},
             {"x": data, "bits": 8, "symmetric": False, "granularity": "channel"},
             {"x": data, "bits": 4, "symmetric": True, "granularity": "group", "group_size": 3}]
    if hidden:
        weight = _x(rng, (6, 16))
        weight[int(rng.integers(0, 6))] *= 50  # one outlier channel
        positive = np.abs(_x(rng, (5, 8))) + 0.25
        tokens = _x(rng, (2, 3, 8)) * rng.uniform(0.1, 10, (2, 3, 1))
        cases = [{"x": np.zeros((3, 4)), "bits": 8, "symmetric": True, "granularity": "tensor"},  # no NaN, no 0
                 {"x": np.zeros((3, 4)), "bits": 8, "symmetric": False, "granularity": "channel"},
                 {"x": positive, "bits": 8, "symmetric": False, "granularity": "tensor"},  # the range holds 0
                 {"x": -positive, "bits": 4, "symmetric": False, "granularity": "token"},
                 {"x": _x(rng, (4, 5)) * 1e-40, "bits": 8, "symmetric": True, "granularity": "tensor"},  # subnormal
                 {"x": _x(rng, (4, 5)) * 1e-40, "bits": 8, "symmetric": False, "granularity": "channel"},
                 {"x": _x(rng, (4, 6)) * 1e30, "bits": 8, "symmetric": False, "granularity": "group",
                  "group_size": 2},
                 {"x": weight, "bits": 8, "symmetric": True, "granularity": "channel"},
                 {"x": weight, "bits": 4, "symmetric": False, "granularity": "channel"},
                 {"x": weight, "bits": 4, "symmetric": True, "granularity": "group", "group_size": 4},
                 {"x": weight.T.copy(), "bits": 4, "symmetric": False, "granularity": "group", "group_size": 2},
                 {"x": tokens, "bits": 8, "symmetric": False, "granularity": "token"},
                 {"x": tokens, "bits": 8, "symmetric": True, "granularity": "channel"},
                 {"x": tokens.astype(np.float32), "bits": 4, "symmetric": False, "granularity": "group",
                  "group_size": 4},
                 {"x": _x(rng, (7,)), "bits": 2, "symmetric": False, "granularity": "tensor"},
                 {"x": _x(rng, (3, 12)), "bits": int(rng.integers(2, 9)), "symmetric": bool(rng.integers(0, 2)),
                  "granularity": "group", "group_size": 6}]
    compare_cases(student, "choose_qparams", cases, affine.choose_qparams, returns="list", hidden=hidden,
                  compare=_params_compare)


@check(points=1)
def group_size_refused(student, rng, hidden):
    """A group_size that does not divide the last dimension raises ValueError naming group_size (read through the
    notebook's refusal helper, so the message is judged in hidden runs too)."""
    for shape, group_size in ([(4, 6), 4], [(2, 3, 10), 4], [(5,), 2]):
        call = f"choose_qparams(x of shape {shape}, granularity='group', group_size={group_size})"
        got = student.call("refusal", x=np.ones(shape), granularity="group", group_size=group_size, returns="any")
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError naming group_size: a group of "
                               f"{group_size} does not tile a last dimension of {shape[-1]}")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it should "
                               f"raise ValueError, since {group_size} does not divide {shape[-1]}")
        if not re.search(r"\bgroup_size\b", str(got[1])):
            raise CheckFailure(f"{call} raised ValueError, but its message should name the argument `group_size` "
                               "and say it must divide the last dimension" + unredacted(f"; it says {got[1]!r}"))


def _q_case(x, scale, zero_point, bits=8, symmetric=True) -> dict:
    x = np.asarray(x, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float32).reshape(np.shape(scale) or (1,) * x.ndim)
    zero_point = np.asarray(zero_point, dtype=np.int32).reshape(scale.shape)
    return {"x": x, "scale": scale, "zero_point": zero_point, "bits": bits, "symmetric": symmetric}


def _quantize_hint(case, got, expected) -> str:
    got = np.asarray(got)
    qmin, qmax = affine.int_range(case["bits"], case["symmetric"])
    if got.shape == expected.shape and (got < qmin).any():
        return f"a code lies below qmin = {qmin}" + (" (symmetric never uses -2**(bits-1))" if case["symmetric"]
                                                    else "")
    return ""


@check(points=2)
def quantize(student, rng, hidden):
    """quantize(x, scale, zero_point, bits, symmetric): int8 codes, x / scale rounded half to even plus the zero
    point, clipped to [qmin, qmax] before the cast."""
    halves = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 63.75, -63.75, -64.0])  # / 0.5: x.5 and past 127
    cases = [_q_case(halves, 0.5, 0, symmetric=True),
             _q_case([[0.0, 1.0, -1.0], [2.0, 3.1, -3.1]], [[0.0125], [0.5]], [[-128], [3]], symmetric=False)]
    if hidden:
        data = _x(rng, (4, 6))
        per_group = affine.choose_qparams(data, bits=4, symmetric=False, granularity="group", group_size=3)
        per_channel = affine.choose_qparams(data, bits=8, symmetric=True, granularity="channel")
        cases = [_q_case(halves, 0.5, -3, symmetric=False),
                 _q_case([-1000.0, -65.0, 64.0, 1000.0], 0.5, 0, symmetric=False),  # past the range: clip, not wrap
                 _q_case([-1000.0, -63.75, -63.5, 1000.0], 0.5, 0, symmetric=True),  # -127 at most, never -128
                 _q_case([-1.0, -0.95, -0.9, 0.9, 1.0], 0.125, 0, bits=4, symmetric=True),  # -7..7
                 _q_case([-1.0, -0.95, -0.9, 0.9, 1.0], 0.125, 1, bits=4, symmetric=False),  # -8..7
                 _q_case([-500.0, 500.0, 200.0], 1.0, 100, symmetric=False),  # 200 + 100 = 300: wraps if cast first
                 _q_case(data, *per_group, bits=4, symmetric=False),
                 _q_case(data, *per_channel),
                 _q_case(data * 1e30, 1e30 / 60, 0, symmetric=True),
                 _q_case(np.zeros((2, 3)), affine.SMALLEST_SCALE, -128, symmetric=False)]
    compare_cases(student, "quantize", cases, affine.quantize, returns="array", hidden=hidden, tolerance=EXACT,
                  dtype="int8", hint=_quantize_hint)


@check(points=1)
def dequantize(student, rng, hidden):
    """dequantize(q, scale, zero_point): (q - zero_point) * scale as float32, the subtraction wider than int8."""
    extremes = np.array([-128, -127, -1, 0, 1, 126, 127], np.int8)

    def case(q, scale, zero_point):
        scale = np.asarray(scale, dtype=np.float32).reshape(np.shape(scale) or (1,) * np.ndim(q))
        return {"q": np.asarray(q, np.int8), "scale": scale,
                "zero_point": np.asarray(zero_point, np.int32).reshape(scale.shape)}
    cases = [case(extremes, 0.5, 0), case([[-128, 0], [5, 127]], [[0.1], [0.25]], [[-128], [127]])]
    if hidden:
        cases = [case(extremes, 0.1, -128),  # 127 - (-128) = 255: wider than int8
                 case(extremes, 0.1, 127),  # -128 - 127 = -255
                 case(rng.integers(-128, 128, (3, 4)), rng.uniform(0.001, 0.1, (3, 1)),
                      rng.integers(-128, 128, (3, 1))),  # per channel
                 case(rng.integers(-8, 8, (2, 6)), rng.uniform(0.01, 1, (2, 3)), rng.integers(-8, 8, (2, 3))),
                 case(extremes, affine.SMALLEST_SCALE, 0)]
    compare_cases(student, "dequantize", cases, affine.dequantize, returns="array", hidden=hidden, tolerance=EXACT,
                  dtype="float32")
