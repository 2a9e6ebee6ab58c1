"""Checks: FP8 encoding with saturation, delayed per-tensor scaling and per-block scaling, bit for bit against
aisys.quant.fp8.

Codes are compared as uint8 bit patterns and scales as float32, exactly: the rules fix both. to_fp8_bits: the
boundary of each format (447, 448, 449, 464 and 465 in E4M3, where rounding and overflow meet; 57344, 61439 and 61440
in E5M2, where an unsaturated cast gives inf), ties to even, subnormals, values that round to -0 (pattern 0x80).
delayed_scaling: a quiet run with one spike (the spike's step saturates, the next `window` steps have a lowered scale,
then it recovers), the first step (scale 1), an all-zero step (the scale stays), a margin, both formats, window 1.
quantize_blockwise: row tiles (1 x k) and square blocks, an all-zero block (scale 1), an outlier in one block, both
formats. block_refused: a block that does not tile x is a ValueError naming block.
"""

import re

import numpy as np

from aisys.quant import fp8
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown, unredacted

EXACT = (0, 0)  # codes and scales are determined bit for bit by the rules


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _pair_compare(names):
    """(codes uint8, scales float32), each exact and named."""
    def compare(got, expected, case):
        if not (isinstance(got, list) and len(got) == 2):
            raise CheckFailure(f"expected a pair ({names[0]}, {names[1]}), got {describe(got)}")
        assert_format(got[1], "float32", where=names[1])
        assert_close(got[1], expected[1], rtol=0, atol=0, where=names[1])
        assert_format(got[0], "uint8", where=names[0])
        assert_close(got[0], expected[0], rtol=0, atol=0, where=names[0])
    return compare


@check(points=2)
def to_fp8_bits(student, rng, hidden):
    """to_fp8_bits(x, fmt): uint8 bit patterns, saturated to [-max, max] before the cast, ties to even."""
    e4m3_edge = _f32([447, 448, 449, 464, 465, 480, 1e4, -465, 1.0625, 1.1875, 0.0, -0.0])
    e5m2_edge = _f32([57344, 61439, 61440, 70000, -1e6, 1.125, 1.375, 0.0, -0.0])
    cases = [{"x": e4m3_edge, "fmt": "e4m3"}, {"x": e5m2_edge, "fmt": "e5m2"}]
    if hidden:
        tiny = _f32([2.0 ** -9, 2.0 ** -10, -2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -6, -2.0 ** -11])  # subnormals, -0
        cases = [{"x": e5m2_edge, "fmt": "e5m2"}, {"x": e4m3_edge, "fmt": "e4m3"},
                 {"x": tiny, "fmt": "e4m3"}, {"x": tiny * _f32(2.0 ** -8), "fmt": "e5m2"},
                 {"x": _f32(rng.standard_normal((3, 5)) * 300), "fmt": "e4m3"},
                 {"x": _f32(rng.standard_normal((4, 4)) * 4e4), "fmt": "e5m2"},
                 {"x": _f32(rng.standard_normal(7)), "fmt": str(rng.choice(["e4m3", "e5m2"]))}]
    compare_cases(student, "to_fp8_bits", cases, fp8.encode, returns="array", hidden=hidden, tolerance=EXACT,
                  dtype="uint8")


def _spiky(rng, steps, size, spike_at, factor=100.0):
    xs = rng.standard_normal((steps, *np.atleast_1d(size))).astype(np.float32)
    xs[spike_at] *= np.float32(factor)
    return xs


def _delayed_hint(case, got, expected) -> str:
    if not (isinstance(got, list) and len(got) == 2):
        return ""
    scales = np.asarray(got[1])
    if scales.shape == expected[1].shape and scales.size and scales[0] != 1:
        return "the first step has an empty history: its scale is 1"
    return ("step t casts with the scale computed after step t-1 from the history of earlier maxima; t's own amax "
            "joins the history after the cast")


@check(points=3)
def delayed_scaling(student, rng, hidden):
    """delayed_scaling(xs, fmt, window, margin): each step cast with the scale from the history of earlier maxima;
    a spike lowers the scale for exactly `window` steps."""
    fixed = np.random.default_rng(5)
    cases = [{"xs": _spiky(fixed, 10, 8, 3), "fmt": "e4m3", "window": 4},
             {"xs": _spiky(fixed, 6, 8, 2, 1e3) * np.float32(40), "fmt": "e5m2", "window": 2, "margin": 1}]
    if hidden:
        with_zero = _spiky(fixed, 7, 6, 5)
        with_zero[2] = 0
        cases = [{"xs": _spiky(fixed, 9, 6, 2), "fmt": "e4m3", "window": 3},
                 {"xs": _spiky(fixed, 8, 6, 3, 1e3) * np.float32(50), "fmt": "e5m2", "window": 2},  # saturates
                 {"xs": with_zero, "fmt": "e4m3", "window": 1},  # an all-zero history: the scale stays
                 {"xs": _spiky(fixed, 5, 6, 1), "fmt": "e4m3", "window": 1, "margin": 2},
                 {"xs": _spiky(rng, int(rng.integers(4, 9)), 5, 0), "fmt": "e4m3", "window": int(rng.integers(1, 5))},
                 {"xs": _spiky(rng, 6, (2, 3), 4, 1e3) * np.float32(60), "fmt": "e5m2", "window": 3}]
    compare_cases(student, "delayed_scaling", cases, fp8.delayed_scaling, returns="list", hidden=hidden,
                  compare=_pair_compare(("codes", "scales")), hint=_delayed_hint)


@check(points=2)
def quantize_blockwise(student, rng, hidden):
    """quantize_blockwise(x, block, fmt): one scale per (br x bc) block, fp8_max / the block's amax."""
    fixed = np.random.default_rng(6)
    weight = _f32(fixed.standard_normal((8, 12)))
    weight[5, 7] = 900  # one outlier: only its block's scale drops
    cases = [{"x": weight, "block": [4, 4], "fmt": "e4m3"}, {"x": weight, "block": [1, 6], "fmt": "e4m3"}]
    if hidden:
        zero_block = _f32(rng.standard_normal((4, 8)))
        zero_block[:2, 4:] = 0
        cases = [{"x": weight, "block": [2, 6], "fmt": "e4m3"},  # not square: rows and columns not swapped
                 {"x": weight * _f32(100), "block": [4, 3], "fmt": "e5m2"},
                 {"x": zero_block, "block": [2, 4], "fmt": "e4m3"},  # an all-zero block: scale 1, codes 0
                 {"x": _f32(rng.standard_normal((3, 16)) * 1e-3), "block": [1, 8], "fmt": "e4m3"},
                 {"x": _f32(rng.standard_normal((6, 6)) * 1e4), "block": [3, 3], "fmt": "e5m2"},
                 {"x": _f32(rng.standard_normal((4, 10))), "block": [4, 10], "fmt": "e4m3"}]
    compare_cases(student, "quantize_blockwise", cases, fp8.quantize_blockwise, returns="list", hidden=hidden,
                  compare=_pair_compare(("codes", "scales")))


@check(points=1)
def block_refused(student, rng, hidden):
    """A block that does not tile x raises ValueError naming block (read through the notebook's refusal helper)."""
    for shape, block in (((6, 10), [4, 4]), ((5, 8), [1, 3]), ((4, 6), [3, 3])):
        call = f"quantize_blockwise(x of shape {shape}, block={block})"
        got = student.call("refusal", x=np.ones(shape, np.float32), block=block, returns="any")
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError naming block: a block of {block} does "
                               f"not tile {shape}")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it should "
                               f"raise ValueError, since a block of {block} does not tile {shape}")
        if not re.search(r"\bblock\b", str(got[1])):
            raise CheckFailure(f"{call} raised ValueError, but its message should name the argument `block` and say "
                               "it must divide the shape" + unredacted(f"; it says {got[1]!r}"))
