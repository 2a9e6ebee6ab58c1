"""Checks: y = A x and y = x A with one thread per output, and which of them reads a row-major A coalesced.

Values are compared with the float64 products (float32 results, within 1e-5). Hidden cases add the edges: a
1 x 1 matrix, one row, one column, sizes either side of a warp and of a block, and a property check on small
random shapes (shrunk to the smallest failing one). The report check runs both functions on one 64 x 96
matrix (rows start on 32-byte sectors, so a coalesced load scores 100 %) and compares with the reference
(aisys.cuda_kernels.gemv): one launch of one thread per output each, no shared memory, and gemv_t's loads
as coalesced as the reference's.
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import gemv as reference

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import efficiency, least_efficient, profiled, reference_launches, where

THREADS = reference.THREADS  # the notebook fixes the same block size
PATTERN_SHAPE = (64, 96)
RTOL = 1e-5
EDGE_SHAPES = [(1, 1), (1, 37), (37, 1), (31, 33), (33, 31), (THREADS + 1, 5), (5, THREADS + 1)]

HALVES = st.integers(-6, 6).map(lambda v: v / 2)  # exact in float32: any difference is a mistake
SHAPES = st.tuples(st.integers(1, 9), st.integers(1, 9))


def _cases_for(axis: int):
    """Hypothesis cases {a, x} with x as long as a's `axis`."""
    return SHAPES.flatmap(lambda shape: st.fixed_dictionaries(
        {"a": hnp.arrays(np.float32, shape, elements=HALVES), "x": hnp.arrays(np.float32, shape[axis],
                                                                               elements=HALVES)}))


def _gemv(a, x):
    return a.astype(np.float64) @ x


def _gemv_t(a, x):
    return x.astype(np.float64) @ a


def _tolerance(product):
    """rtol 1e-5, atol 1e-5 of the largest sum of |terms| of an output."""
    def tolerance(case):
        return RTOL, RTOL * float(np.max(product(np.abs(case["a"]), np.abs(case["x"])), initial=0.0)) + 1e-30
    return tolerance


def _matrix(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _cases(rng, hidden, axis: int) -> list[dict]:
    shapes = [(3, 4), (40, 70), (130, 20)]
    if hidden:
        shapes = EDGE_SHAPES + [tuple(int(s) for s in rng.integers(2, 150, size=2))]
    return [{"a": _matrix(rng, shape), "x": _matrix(rng, shape[axis])} for shape in shapes]


@check(points=2)
def gemv(student, rng, hidden):
    """gemv(a, x) returns a @ x in float32, for any shape, ragged blocks included."""
    compare_cases(student, "gemv", _cases(rng, hidden, 1), _gemv, returns="array", hidden=hidden,
                  tolerance=_tolerance(_gemv), dtype="float32")
    if hidden:
        compare_property(student, "gemv", _cases_for(1), _gemv, rng=rng, returns="array", hidden=hidden,
                         tolerance=_tolerance(_gemv), dtype="float32", examples=12)


@check(points=2)
def gemv_t(student, rng, hidden):
    """gemv_t(a, x) returns x @ a (a.T @ x) in float32, for any shape, ragged blocks included."""
    compare_cases(student, "gemv_t", _cases(rng, hidden, 0), _gemv_t, returns="array", hidden=hidden,
                  tolerance=_tolerance(_gemv_t), dtype="float32")
    if hidden:
        compare_property(student, "gemv_t", _cases_for(0), _gemv_t, rng=rng, returns="array", hidden=hidden,
                         tolerance=_tolerance(_gemv_t), dtype="float32", examples=12)


@cache
def _reference_launches() -> list[dict]:
    """The reference gemv_t's reports on the pattern shape (they do not depend on the values)."""
    return reference_launches(reference.gemv_t, np.ones(PATTERN_SHAPE, np.float32),
                              np.ones(PATTERN_SHAPE[0], np.float32))


def _launches(student, function: str, a, x, truth) -> list[dict]:
    """The student's reports for one call: right values, one launch of one thread per output, no shared memory."""
    value, launches = profiled(student, function, a=a, x=x, returns="array")
    shape = f"{a.shape[0]} x {a.shape[1]} float32 matrix"
    expected = truth(a, x)
    rtol, atol = _tolerance(truth)({"a": a, "x": x})
    if np.shape(value) != expected.shape or not np.allclose(value, expected, rtol=rtol, atol=atol):
        raise CheckFailure(f"on a {shape}, {function} returned a wrong result (the check `{function}` says more); "
                           f"its launch report is graded only when it is right")
    outputs = expected.size
    blocks = math.ceil(outputs / THREADS)
    configurations = [(math.prod(launch["grid"]), math.prod(launch["block"])) for launch in launches]
    if configurations != [(blocks, THREADS)]:
        raise CheckFailure(
            f"on a {shape}, {function} made {len(launches)} launch(es) of (blocks, threads per block) "
            f"{configurations}; the drill asks for one launch of one thread per output: {outputs} outputs, so "
            f"[{blocks}, {THREADS}] (ceil(outputs / THREADS) blocks of THREADS = {THREADS})")
    if launches[0]["shared"]["bytes_per_block"] or launches[0]["atomics"]["requests"]:
        raise CheckFailure(
            f"on a {shape}, {function}'s kernel used shared memory or atomics; the drill is about global memory "
            f"alone: each thread reads its operands from a and x and writes its one output")
    return launches


@check(points=3)
def which_coalesces(student, rng, hidden):
    """One thread per output in both, and the report shows which reads A coalesced: gemv_t (x A), as the
    reference's does, while gemv (A x) reads a column of A per warp instruction."""
    a = _matrix(rng, PATTERN_SHAPE)
    mine_rows = _launches(student, "gemv", a, _matrix(rng, PATTERN_SHAPE[1]), _gemv)
    mine_columns = _launches(student, "gemv_t", a, _matrix(rng, PATTERN_SHAPE[0]), _gemv_t)
    mine, theirs = efficiency(mine_columns), efficiency(_reference_launches())
    if mine >= 0.9 * theirs:
        return
    worst = least_efficient(mine_columns)
    raise CheckFailure(
        f"on a {PATTERN_SHAPE[0]} x {PATTERN_SHAPE[1]} float32 matrix, {mine:.0%} of the bytes gemv_t's kernel moved "
        f"from global memory were bytes it used (the reference's gemv_t: {theirs:.0%}; your gemv: "
        f"{efficiency(mine_rows):.0%}). The worst access is {where(worst)} ({worst['kind']}): {worst['sectors']} "
        f"sectors of 32 bytes where {worst['ideal_sectors']} would hold the data. With one thread per output of "
        f"x A, thread k reads column k, a[m, k] for m = 0, 1, ...: at each step the 32 lanes of a warp read 32 "
        f"consecutive floats of row m (k, k + 1, ...), which is what coalesces. Let the lane index run along the "
        f"row, the contiguous axis, and loop over the rows")
