"""Checks: a tiled float16 matmul in Triton with a float32 accumulator, B as it is or transposed, counted tiles.

The truth is the float64 product of the float16 inputs, rounded to float16. A kernel that
accumulates in float32 and rounds once, at the store, is within one float16 unit in the last place
plus the float32 sum's worst case, K float32 steps on the largest sum of |a||b| (as in chapter 3's
triton_gemm). `matmul` covers shapes at the tiles' edges (32 x 32 x 16) in both layouts of B and a
property check on small shapes; `matmul_fp32_accumulator` holds a float16 sum that passes 65504
halfway along K although the product fits (a float16 accumulator gives inf) and a long K of
positive numbers (a float16 accumulator rounds at every step). In Triton's interpreter every load
or store outside a tensor is an error (aisys.triton_interpreter): a missing mask on K reads past
A's last row or B's end and fails there. `matmul_tiles` runs matmul in the grader's Triton
interpreter (the clean room) and counts its launch: one program per tile, every multiply-add in
tl.dot, each program reading its panels of A and B once.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.triton_kernels import matmul as reference  # noqa: F401  the answer key: kept out of the grading kernel

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure, assert_close

BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 16  # the notebook's tiles
FP16_STEP = 2.0**-10  # one float16 unit in the last place, relative
FP32_STEP = 2.0**-23
SMALLEST = 2.0**-24  # float16's smallest subnormal


def _b_of(b, transpose_b):
    """B (K, N) as a float64 array, from b as the student receives it."""
    return (b.T if transpose_b else b).astype(np.float64)


def _expected(a, b, transpose_b):
    """The float64 product of the float16 inputs, rounded to float16."""
    return (a.astype(np.float64) @ _b_of(b, transpose_b)).astype(np.float16)


def _tolerance(case):
    a, b = case["a"].astype(np.float64), _b_of(case["b"], case["transpose_b"])
    return FP16_STEP, a.shape[1] * FP32_STEP * float((np.abs(a) @ np.abs(b)).max()) + SMALLEST


def _case(rng, M, N, K, transpose_b, kind="normal"):
    """(a, b, transpose_b): standard normal, uniform [0, 1), or a float16 sum that overflows halfway along K."""
    if kind == "normal":
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    elif kind == "uniform":  # all positive: every partial sum grows, so every rounding of it counts
        a, b = rng.random((M, K)), rng.random((K, N))
    else:  # K even, 256 to 510: products of 24 x 24 to 32 x 32, so after 128 steps of k the sum passes 65504;
        # the second half of B is the first negated, and |C| <= K/2 x (32 - 24) x 32 = 128 K < 65504
        a = rng.uniform(24, 32, (M, K))
        half = rng.uniform(24, 32, (K // 2, N))
        b = np.concatenate([half, -half])
    b = np.ascontiguousarray(b.T) if transpose_b else b
    return {"a": a.astype(np.float16), "b": b.astype(np.float16), "transpose_b": transpose_b}


def _describe(case):
    a, b, transposed = case["a"], case["b"], case["transpose_b"]
    return f"matmul(a {a.shape[0]}x{a.shape[1]}, b {b.shape[0]}x{b.shape[1]}, transpose_b={transposed})"


def _hint(case, got, expected):
    """What the kind of difference usually means."""
    if got.shape != expected.shape or got.dtype != np.float16:
        return "Return the (M, N) product as float16: C has a's rows and B's columns."
    if not np.isfinite(got.astype(np.float64)).all():
        return ("inf where the product is finite: a float16 accumulator overflows past 65504 although the product "
                "fits. Accumulate in tl.float32 and convert once, at the store.")
    rtol, atol = _tolerance(case)
    a, b = case["a"].astype(np.float64), _b_of(case["b"], case["transpose_b"])
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    if (error <= 8 * (FP16_STEP * (np.abs(a) @ np.abs(b)) + atol)).all():
        return ("The errors are a few float16 units in the last place, as rounding the sum at every step of K "
                "gives: accumulate in tl.float32 and convert once, at the store.")
    if case["transpose_b"]:
        return ("With transpose_b, b is (N, K) and B is its transpose: pass the strides of the view b.T "
                "(stride_bk = b.stride(1), stride_bn = b.stride(0)); a reshape is not a transpose.")
    return ("Check the loop over K: both loads masked with offs_k < K - k0 (other=0.0), and the steps "
            "a_ptrs += BLOCK_K * stride_ak (columns of A) and b_ptrs += BLOCK_K * stride_bk (rows of B).")


def _products(student, cases, hidden):
    compare_cases(student, "matmul", cases, _expected, returns="array", hidden=hidden, tolerance=_tolerance,
                  dtype="float16", hint=_hint, call=_describe)


def _edge(rng, block):
    """One below, at, or one above a multiple of `block`."""
    return int(rng.integers(1, 3)) * block + int(rng.integers(-1, 2))


SHAPES = st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.booleans())


@check(points=3)
def matmul(student, rng, hidden):
    """matmul(a, b, transpose_b) matches the product: 1x1x1, sizes at tile edges, K = 1, B as it is or transposed."""
    plan = [(1, 1, 1, False), (33, 31, 70, True), (50, 70, 40, False)]
    if hidden:
        plan = [(1, 1, 1, True), (int(rng.integers(2, 40)), int(rng.integers(2, 40)), 1, False),
                (1, int(rng.integers(20, 100)), int(rng.integers(20, 100)), True),
                (int(rng.integers(20, 100)), 1, int(rng.integers(20, 100)), False)]
        plan += [(_edge(rng, BLOCK_M), _edge(rng, BLOCK_N), _edge(rng, BLOCK_K), transposed)
                 for transposed in (False, True, False, True)]
    _products(student, [_case(rng, *shape) for shape in plan], hidden)
    if hidden:
        seed = int(rng.integers(2**32))
        cases = SHAPES.map(lambda shape: _case(np.random.default_rng([seed, *shape[:3]]), *shape))
        compare_property(student, "matmul", cases, _expected, rng=rng, returns="array", hidden=hidden, examples=8,
                         tolerance=_tolerance, dtype="float16", hint=_hint, call=_describe)


@check(points=2)
def matmul_fp32_accumulator(student, rng, hidden):
    """A float32 accumulator: float16 sums past 65504 halfway along K, and a long K of positive numbers."""
    cases = [_case(rng, 16, 16, 256, False, "overflow"), _case(rng, 8, 8, 1024, True, "uniform")]
    if hidden:
        cases = [_case(rng, int(rng.integers(10, 33)), int(rng.integers(10, 33)), 2 * int(rng.integers(128, 256)),
                       transposed, "overflow") for transposed in (False, True)]
        cases.append(_case(rng, int(rng.integers(5, 17)), int(rng.integers(5, 17)), int(rng.integers(1500, 2000)),
                           bool(rng.integers(2)), "uniform"))
    _products(student, cases, hidden)


TILES_SHAPE = (40, 40, 64)  # 2 x 2 tiles of C, the last row and column of tiles ragged


@check(points=1)
def matmul_tiles(student, rng, hidden):
    """matmul runs one program per tile of C, does every multiply-add in tl.dot and reads each program's panels of
    A and B once (counted in the grader's Triton interpreter)."""
    M, N, K = TILES_SHAPE
    case = _case(rng, M, N, K, False)
    got, launches = student.profiled_call("matmul", returns="array", dialect="triton", **case)
    rtol, atol = (16 * t for t in _tolerance(case))  # loosely: precision is the other checks' business
    assert_close(got, _expected(**case), rtol=rtol, atol=atol, where=_describe(case))
    if len(launches) != 1:
        raise CheckFailure(f"{_describe(case)} runs {len(launches)} Triton kernels: compute C in one launch.")
    (launch,) = launches
    tiles_m, tiles_n = -(-M // BLOCK_M), -(-N // BLOCK_N)
    if launch["programs"] != tiles_m * tiles_n:
        raise CheckFailure(f"{_describe(case)} runs {launch['programs']} programs for {tiles_m} x {tiles_n} tiles of "
                           "C: launch one program per BLOCK_M x BLOCK_N tile, which loops over K.")
    if launch["dot_macs"] < M * N * K:
        raise CheckFailure(f"{_describe(case)} does {launch['dot_macs']} of its {M * N * K} multiply-adds in tl.dot: "
                           "products summed with tl.sum run on the ordinary arithmetic units; tl.dot of a tile of A "
                           "by a tile of B is what Triton turns into Tensor Core instructions.")
    panels = tiles_n * M * K + tiles_m * K * N  # each program: its BLOCK_M rows of A and BLOCK_N columns of B, once
    if launch["loaded"] > panels:
        raise CheckFailure(f"{_describe(case)} loads {launch['loaded']} elements where one pass of each program over "
                           f"its panels of A and B loads {panels}: load each tile of A and of B once per step of K.")
