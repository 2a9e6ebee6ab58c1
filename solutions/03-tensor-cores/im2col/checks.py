"""Checks: output size, the column matrix, convolution as GEMM, Winograd F(2,3).

Expected values come from `aisys.conv`, whose tests pin it to torch
(`F.unfold` and `F.conv2d`, integers exactly). Geometry arguments travel as
(height, width) pairs. Data: float64 standard normals; float32 multiples of
1/8 (products and sums of those are exact in float32, so any summation order
gives the reference's bits); int64 small integers, and for the convolutions one
case of positive integers near 2**26, whose sums pass 2**53 and so are only
exact in integer arithmetic. Results must keep x's dtype.

Hidden geometries cover a 1x1 image and kernel, a kernel as large as the
padded input (one output), a last window that does not fit (the floor in the
size formula), padding larger than half the kernel, dilation 2 and 3,
non-square kernels, strides and paddings, batch 1 and channels 1, plus seeded
random ones; every check sees padding, dilation, integers and ragged strides.
The Winograd checks ask for the elementwise products as well as the outputs,
so that they see the 4 (16) multiplications, not just a right answer.
"""

import numpy as np

from aisys import conv

from aisys_grader.checks import check, compare_cases, compare_timed
from aisys_grader.compare import CheckFailure, assert_close, unredacted


# (H, W, (kh, kw), (sh, sw), (ph, pw), (dh, dw)): the edges every hidden run covers
EDGE_GEOMETRIES = [
    (1, 1, (1, 1), (1, 1), (0, 0), (1, 1)),  # one pixel, a 1x1 kernel
    (5, 3, (5, 3), (1, 1), (0, 0), (1, 1)),  # the kernel fills the input: one output
    (8, 9, (3, 3), (2, 2), (0, 0), (1, 1)),  # 8: the last window (rows 6..8) does not fit; 9: it does
    (6, 7, (2, 3), (3, 2), (2, 3), (1, 1)),  # padding beyond half the kernel, ragged strides
    (9, 10, (3, 2), (1, 2), (1, 0), (3, 2)),  # dilation 3 and 2
    (7, 5, (1, 3), (2, 1), (0, 2), (1, 2)),  # 1-tap rows, dilation along W only
]
# 3x3 taps, so that every output sums at least 4 products of integers near 2**26 (past 2**53)
LARGE_INTEGER_GEOMETRY = (6, 7, (3, 3), (1, 2), (1, 1), (1, 1))
VISIBLE_GEOMETRIES = [
    (5, 5, (3, 3), (1, 1), (0, 0), (1, 1)),
    (6, 7, (3, 2), (2, 1), (1, 1), (1, 1)),
    (8, 8, (3, 3), (2, 2), (1, 1), (2, 2)),
]


def _arguments(kernel, stride, padding, dilation) -> dict:
    """Geometry arguments as the student receives them: (height, width) pairs."""
    return {"kernel_size": list(kernel), "stride": list(stride), "padding": list(padding), "dilation": list(dilation)}


def _random_geometry(rng) -> tuple:
    """A random geometry with at least one output position."""
    while True:
        H, W = (int(n) for n in rng.integers(1, 14, size=2))
        kernel = tuple(int(k) for k in rng.integers(1, 6, size=2))
        stride = tuple(int(s) for s in rng.integers(1, 4, size=2))
        padding = tuple(int(rng.integers(0, k + 1)) for k in kernel)
        dilation = tuple(int(d) for d in rng.integers(1, 4, size=2))
        try:
            for size, k, s, p, d in zip((H, W), kernel, stride, padding, dilation):
                conv.output_size(size, k, s, p, d)
        except ValueError:
            continue
        return H, W, kernel, stride, padding, dilation


def _data(rng, shape, dtype) -> np.ndarray:
    if dtype == "int64 huge":  # pixels past 2**53, which a float64 cannot hold: a copy must stay in integers
        return rng.integers(2**60, 2**61, size=shape, dtype=np.int64) | 1
    if dtype == "int64 large":  # products near 2**51 and sums past 2**53: exact in int64, rounded in float64
        return rng.integers(2**25, 2**26, size=shape, dtype=np.int64)
    if dtype == "int64":
        return rng.integers(-9, 10, size=shape, dtype=np.int64)
    if dtype == "float32":  # multiples of 1/8: every product and sum here is exact in float32
        return (rng.integers(-16, 17, size=shape) / 8).astype(np.float32)
    return rng.standard_normal(shape)


def _hidden_plan(rng, random_count: int) -> list[tuple]:
    """Geometries with dtypes: each edge in turn with one of the dtypes, then seeded random ones."""
    dtypes = ["float64", "int64", "float32"]
    plan = [(g, dtypes[i % 3]) for i, g in enumerate(EDGE_GEOMETRIES)]
    plan += [(_random_geometry(rng), str(rng.choice(dtypes))) for _ in range(random_count)]
    return plan


def _dtype_or_shape_hint(got, expected, shape_hint: str) -> str | None:
    if got.shape != expected.shape:
        return shape_hint
    if got.dtype != expected.dtype:
        return ("Keep x's dtype: integer inputs give exact integer results. An array made by np.zeros(shape) is "
                "float64; make it with dtype=x.dtype (or np.empty_like / np.zeros_like).")
    return None


def _sizes(case) -> str:
    x, (kh, kw) = case["x"], case["kernel_size"]
    sizes = [conv.output_size(n, k, s, p, d) for n, k, s, p, d in
             zip(x.shape[2:], (kh, kw), case["stride"], case["padding"], case["dilation"])]
    return f"OH, OW = {sizes[0]}, {sizes[1]}"


# ---------------------------------------------------------------------------------------------------------------


@check(points=1)
def output_size(student, rng, hidden):
    """output_size(size, kernel, stride, padding, dilation) is PyTorch's floor formula, at and off every boundary."""
    cases = [(7, 3, 1, 0, 1), (7, 3, 2, 1, 1), (8, 3, 2, 0, 1), (10, 3, 1, 2, 2)]
    if hidden:
        cases = [(1, 1, 1, 0, 1), (5, 5, 1, 0, 1), (3, 5, 1, 1, 1), (9, 3, 2, 0, 1), (10, 3, 2, 0, 1),
                 (11, 3, 2, 0, 1), (7, 2, 3, 2, 1), (9, 3, 1, 0, 3), (224, 7, 2, 3, 1), (56, 1, 2, 0, 1)]
        for _ in range(8):
            H, _, kernel, stride, padding, dilation = _random_geometry(rng)
            cases.append((H, kernel[0], stride[0], padding[0], dilation[0]))
    names = ("size", "kernel", "stride", "padding", "dilation")
    compare_cases(student, "output_size", [dict(zip(names, values)) for values in cases], conv.output_size,
                  returns="integer", hidden=hidden, hint=_output_size_hint)


def _output_size_hint(case, got, expected) -> str:
    size, kernel, stride, padding, dilation = (case[k] for k in ("size", "kernel", "stride", "padding", "dilation"))
    span = dilation * (kernel - 1) + 1  # the five integers are the case, hidden ones too: unredacted only
    return (f"The kernel spans dilation (kernel - 1) + 1{unredacted(f' = {span}')} pixels of the padded input's "
            f"{unredacted(f'{size + 2 * padding}', 'size + 2 padding')}; windows start every "
            f"{unredacted(f'{stride}', '`stride`')} pixels, and one that would run past the end is dropped: "
            "floor((size + 2 padding - span) / stride) + 1, rounding down, never up.")


def _im2col_hint(case, got, expected) -> str:
    x, (kh, kw) = case["x"], case["kernel_size"]
    B, C = x.shape[:2]
    general = _dtype_or_shape_hint(got, expected, (
        f"The column matrix has shape (B, C * kh * kw, OH * OW) = {expected.shape} here ({_sizes(case)}): "
        f"pad x by `padding` on both sides first, and count output positions with output_size."))
    if general:
        return general
    if x.dtype.kind == "i" and np.abs(x).max() > 2**53:
        return ("These pixels lie past 2**53, where a float64 no longer holds every integer: copy them into an "
                "array of x's dtype, never through a float one (np.zeros(shape) is float64).")
    L = expected.shape[2]
    tap_major = expected.reshape(B, C, kh, kw, L).transpose(0, 2, 3, 1, 4).reshape(B, C * kh * kw, L)
    if C > 1 and np.array_equal(got, tap_major):
        return ("The right numbers, with rows in (kh, kw, C) order: unfold's (and the GEMM's) order is (C, kh, kw), "
                "row c * kh * kw + p * kw + q for tap (p, q) of channel c.")
    return ("Tap (p, q) of output (i, j) reads the padded input at row i * stride_h + p * dilation_h and column "
            "j * stride_w + q * dilation_w: the stride moves the window, the dilation spaces its taps. Columns are "
            "output positions in row-major order, i * OW + j; outside the image, zeros.")


@check(points=3)
def im2col(student, rng, hidden):
    """im2col(x, kernel_size, stride, padding, dilation) equals torch's F.unfold: (B, C*kh*kw, OH*OW), x's dtype."""
    plan = _hidden_plan(rng, 8) + [(LARGE_INTEGER_GEOMETRY, "int64 huge")] if hidden \
        else list(zip(VISIBLE_GEOMETRIES, ["float64", "float32", "int64"]))
    cases = []
    for i, ((H, W, *geometry), dtype) in enumerate(plan):
        B, C = (1 + i % 2, 1 + i % 3) if hidden else (1, 2)  # batch 1 and channels 1 among them
        cases.append({"x": _data(rng, (B, C, H, W), dtype), **_arguments(*geometry)})
    compare_cases(student, "im2col", cases, conv.im2col, returns="array", hidden=hidden, dtype="reference",
                  hint=_im2col_hint)


def _conv_cases(rng, hidden, grouped: bool) -> list[dict]:
    """Cases for conv2d_gemm; with `grouped`, groups from 2 to C, including depthwise and groups of several channels."""
    plan = _hidden_plan(rng, 6) if hidden else list(zip(VISIBLE_GEOMETRIES, ["float64", "float32", "int64"]))
    if hidden:
        plan.append((LARGE_INTEGER_GEOMETRY, "int64 large"))
    cases = []
    for i, ((H, W, kernel, stride, padding, dilation), dtype) in enumerate(plan):
        if grouped:
            groups = [2, 3, 4][i % 3] if hidden else [2, 3, 2][i]
            depthwise = hidden and i % 4 == 3
            per_group = 1 if depthwise else int(rng.integers(2, 4)) if hidden else 2
            C, OC = groups * per_group, groups * int(rng.integers(1, 3))
        else:
            groups, C, OC = (1, 1 + i % 4, 1 + i % 3) if hidden else (1, 3, 2)
        B = 1 + i % 2 if hidden else 1
        cases.append({"x": _data(rng, (B, C, H, W), dtype), "w": _data(rng, (OC, C // groups, *kernel), dtype),
                      "stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups})
    return cases


def _conv_reference(x, w, stride, padding, dilation, groups):
    return conv.conv2d(x, w, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups)


def _im2col_blamed(student, case) -> str:
    """'' unless the student's im2col is wrong on this case's x: then that it is the cause."""
    arguments = {"x": case["x"], **_arguments(case["w"].shape[2:], case["stride"], case["padding"], case["dilation"])}
    try:
        got = student.call("im2col", returns="array", **arguments)
        assert_close(got, conv.im2col(**arguments))
        if got.dtype == case["x"].dtype:
            return ""
    except CheckFailure:
        pass
    return ("Your im2col is wrong for this case's x and geometry, and conv2d_gemm multiplies its columns: fix im2col "
            "first (its check says how).")


def _conv_hint(student, case, got, expected) -> str:
    x, w = case["x"], case["w"]
    if blamed := _im2col_blamed(student, case):
        return blamed
    sizes = _sizes({**case, "kernel_size": list(w.shape[2:])})
    general = _dtype_or_shape_hint(got, expected, f"The output is (B, OC, OH, OW) = {expected.shape} here ({sizes}).")
    if general:
        return general
    flipped = _conv_reference(**{**case, "w": np.ascontiguousarray(w[:, :, ::-1, ::-1])})
    if w.shape[2] * w.shape[3] > 1 and np.allclose(got, flipped, rtol=1e-6, atol=1e-6):
        return ("This is the convolution with a flipped kernel: a deep-learning conv2d is a cross-correlation, "
                "w[o, c, p, q] multiplies the input at tap (p, q) as it stands; do not flip w.")
    if x.dtype == np.int64 and np.abs(x).max() > 2**20:
        return ("With integers near 2**26 the products pass 2**51 and their sums 2**53: an int32 accumulator "
                "overflows (wraps around) and float64 arithmetic rounds; only int64 is exact. Keep x's dtype all "
                "the way.")
    if case["groups"] > 1:
        return (f"With groups = {case['groups']}, group g holds the consecutive input channels g*C/groups to "
                f"(g+1)*C/groups - 1 (rows g*K to (g+1)*K - 1 of the columns, K = C/groups * kh * kw) and the "
                f"consecutive filters g*OC/groups to (g+1)*OC/groups - 1: one GEMM (OC/groups x K) @ (K x OH*OW) each.")
    return ("W reshaped to (OC, C * kh * kw) times the columns (C * kh * kw, OH * OW) gives (OC, OH * OW) per image; "
            "both sides must order the taps (C, kh, kw), as w.reshape(OC, -1) does.")


def _timed_case(rng) -> dict:
    """A 254 x 254 output of a 3 x 3 filter: the GEMM takes a millisecond, a loop over the 64516 output pixels a
    Python-level step each, some 100 times as long. The padding makes the output, not the input, large: a large
    argument costs the sandbox's bridge far more than a large result (a 200 x 200 float64 image, 0.15 CPU s)."""
    return {"x": rng.standard_normal((1, 1, 4, 4)), "w": rng.standard_normal((1, 1, 3, 3)), "stride": [1, 1],
            "padding": [126, 126], "dilation": [1, 1], "groups": 1}


@check(points=2)
def conv2d_gemm(student, rng, hidden):
    """conv2d_gemm(x, w, stride, padding, dilation, groups=1) equals F.conv2d, integers exactly, at a GEMM's speed."""
    compare_cases(student, "conv2d_gemm", _conv_cases(rng, hidden, grouped=False), _conv_reference,
                  returns="array", hidden=hidden, dtype="reference",
                  hint=lambda case, got, expected: _conv_hint(student, case, got, expected))
    try:
        compare_timed(student, "conv2d_gemm", _timed_case, _conv_reference, rng, returns="array", repeats=3,
                      allowance=0.05)
    except CheckFailure as failure:
        slow = "too slow" in str(failure)
        raise CheckFailure(f"{failure}" + (": one matrix product per group on im2col's columns computes every output "
                                           "at once, where a loop over the output pixels runs a small dot product "
                                           "per pixel in Python" if slow else "")) from None


@check(points=2)
def conv2d_gemm_groups(student, rng, hidden):
    """conv2d_gemm with groups > 1 (depthwise included) equals F.conv2d with the same groups."""
    compare_cases(student, "conv2d_gemm", _conv_cases(rng, hidden, grouped=True), _conv_reference,
                  returns="array", hidden=hidden, dtype="reference",
                  hint=lambda case, got, expected: _conv_hint(student, case, got, expected))


# ---------------------------------------------------------------------------------------------------------------


def _winograd_1d(d, g) -> dict:
    return {"products": (conv.F23_G @ g) * (conv.F23_BT @ d), "y": conv.winograd_f23(d, g)}


def _winograd_tile(d, g) -> dict:
    return {"products": (conv.F23_G @ g @ conv.F23_G.T) * (conv.F23_BT @ d @ conv.F23_BT.T),
            "y": conv.winograd_f23_tile(d, g)}


def _winograd_cases(rng, hidden, d_shape, g_shape) -> list[dict]:
    if not hidden:
        return [{"d": np.arange(1.0, 1.0 + np.prod(d_shape)).reshape(d_shape), "g": np.ones(g_shape)},
                {"d": rng.standard_normal(d_shape), "g": rng.standard_normal(g_shape)}]
    cases = [{"d": np.zeros(d_shape), "g": rng.standard_normal(g_shape)},
             {"d": rng.integers(-9, 10, d_shape).astype(np.float64), "g": rng.integers(-9, 10, g_shape).astype(float)}]
    cases += [{"d": rng.standard_normal(d_shape) * 10.0**rng.integers(-3, 4), "g": rng.standard_normal(g_shape)}
              for _ in range(6)]
    return cases


def _winograd_hint(case, got, expected) -> str:
    """What is wrong, by the first part of the result (products, then y) that differs."""
    if not (isinstance(got, dict) and got.keys() == expected.keys()):
        return "Return a dict {'products': ..., 'y': ...} of two arrays."
    products = got["products"]
    if isinstance(products, np.ndarray) and products.shape != expected["products"].shape:
        return ("F(2,3) makes 4 products, F(2x2, 3x3) a 4x4 array of 16: (G g) * (B^T d), in 2-D U * V, "
                "not the 6 (36) products of the direct computation.")
    if _differs(products, expected["products"]):
        return ("The products are (G g) * (B^T d) elementwise, with the matrices G and BT as given (the data "
                "transform is BT @ d, not BT.T @ d); in 2-D, U = G g G^T and V = B^T d B.")
    return "The products are right, so the output transform is wrong: y = A^T m, in 2-D A^T M A."


def _differs(got, expected) -> bool:
    try:
        assert_close(got, expected)
    except CheckFailure:
        return True
    return False


@check(points=1)
def winograd_f23(student, rng, hidden):
    """winograd_f23(d, g) returns the 4 products (G g) * (B^T d) and the 2 outputs A^T m of the correlation."""
    compare_cases(student, "winograd_f23", _winograd_cases(rng, hidden, (4,), (3,)), _winograd_1d,
                  returns="mapping", hidden=hidden, hint=_winograd_hint)


@check(points=2)
def winograd_f23_tile(student, rng, hidden):
    """winograd_f23_tile(d, g) returns the 4x4 products U * V and the 2x2 outputs of F(2x2, 3x3)."""
    compare_cases(student, "winograd_f23_tile", _winograd_cases(rng, hidden, (4, 4), (3, 3)), _winograd_tile,
                  returns="mapping", hidden=hidden, hint=_winograd_hint)
