"""Checks: a shared-memory tiled matrix multiply, right on ragged shapes, race-free, and loading what tiles load.

Values are compared with the float64 product (float32 results, within 1e-5). Hidden cases add the edges:
1 x 1 x 1, K = 1, a single row or column, K either side of a tile, exact multiples of the tile, ragged
shapes in every dimension, and a property check on small random shapes (shrunk to the smallest failing
one). The report checks run the student's matmul in the simulator: no race or barrier error on a ragged
shape and on whole tiles, and global load instructions compared with the reference kernel's
(aisys.cuda_kernels.matmul) on one product of whole tiles, where tiling loads each element of A
ceil(N / TILE) times and no tiling N times (aisys.gemm_tiling.tile_reads counts them).
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import matmul as reference
from aisys.gemm_tiling import tile_reads

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import errors_message, lines, profiled, reference_launches, total, where

TILE = reference.TILE  # the notebook fixes the same tile
RTOL = 1e-5
LOADS_ALLOWED = 1.25  # global load instructions, as a multiple of the reference's
PATTERN = (16, 32, 32)  # (M, K, N): whole tiles, four steps of K, four columns of tiles
RAGGED = (13, 19, 11)  # (M, K, N): a ragged edge in every dimension, K past two tiles
EDGES = [(1, 1, 1), (1, 9, 1), (9, 1, 9), (TILE, TILE, TILE), (7, TILE - 1, 9), (9, TILE + 1, 7), (3, 2 * TILE, 20),
         (2 * TILE, 3, 1)]

HALVES = st.integers(-6, 6).map(lambda v: v / 2)  # exact in float32: any difference is a mistake
PRODUCTS = st.tuples(st.integers(1, 10), st.integers(1, 18), st.integers(1, 10)).flatmap(
    lambda mkn: st.fixed_dictionaries({"a": hnp.arrays(np.float32, mkn[:2], elements=HALVES),
                                       "b": hnp.arrays(np.float32, mkn[1:], elements=HALVES)}))


def _product(a, b):
    return a.astype(np.float64) @ b


def _tolerance(case) -> tuple:
    """rtol 1e-5, atol 1e-5 of the largest sum of |terms| of an element of c."""
    return RTOL, RTOL * float(np.max(np.abs(case["a"]).astype(np.float64) @ np.abs(case["b"]))) + 1e-30


def _operands(rng, M, K, N) -> dict:
    return {"a": rng.standard_normal((M, K)).astype(np.float32), "b": rng.standard_normal((K, N)).astype(np.float32)}


@check(points=3)
def matmul(student, rng, hidden):
    """matmul(a, b) returns a @ b in float32, for any shape, ragged tiles included."""
    shapes = [(4, 3, 5), RAGGED, (2 * TILE, 2 * TILE, TILE)]
    if hidden:
        shapes = EDGES + [tuple(int(s) for s in rng.integers(2, 3 * TILE, size=3))]
    compare_cases(student, "matmul", [_operands(rng, *shape) for shape in shapes], _product, returns="array",
                  hidden=hidden, tolerance=_tolerance, dtype="float32")
    if hidden:
        compare_property(student, "matmul", PRODUCTS, _product, rng=rng, returns="array", hidden=hidden,
                         tolerance=_tolerance, dtype="float32", examples=10)


def _launches(student, rng, shape) -> list[dict]:
    """The student's reports on one product; CheckFailure on a race or barrier error, or a wrong result."""
    case = _operands(rng, *shape)
    value, launches = profiled(student, "matmul", returns="array", **case)
    M, K, N = shape
    if error := errors_message(launches):
        raise CheckFailure(
            f"on a {M} x {K} times {K} x {N} product, {error}. Each step needs two barriers: one after the loads "
            f"(no thread reads a tile element before its loader wrote it) and one after the sums (no thread "
            f"overwrites the tiles for the next step while another still reads them); and every thread of a "
            f"block, in or out of the matrices, must reach both: put the bounds checks around the loads and the "
            f"final store, never around a barrier")
    expected = _product(**case)
    rtol, atol = _tolerance(case)
    if np.shape(value) != expected.shape or not np.allclose(value, expected, rtol=rtol, atol=atol):
        raise CheckFailure(f"on a {M} x {K} times {K} x {N} product, matmul returned a wrong result (the check "
                           f"`matmul` says more); its launch reports are graded only when it is right")
    return launches


@check(points=1)
def matmul_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, with ragged tiles and with whole ones."""
    for shape in (RAGGED, PATTERN):
        _launches(student, rng, shape)


@cache
def _reference_launches() -> list[dict]:
    """The reference kernel's reports on the pattern product (they do not depend on the values)."""
    M, K, N = PATTERN
    return reference_launches(reference.matmul, np.ones((M, K), np.float32), np.ones((K, N), np.float32))


@check(points=3)
def matmul_tiled_loads(student, rng, hidden):
    """Tiled loads, read from the report: about as few global load instructions as the reference's tiled kernel,
    each element of A loaded about ceil(N / TILE) times, not N times."""
    M, K, N = PATTERN
    launches, theirs = _launches(student, rng, PATTERN), _reference_launches()
    mine, their_loads = sum(line["requests"] for line in lines(launches, "global", "load")), \
        sum(line["requests"] for line in lines(theirs, "global", "load"))
    if mine <= LOADS_ALLOWED * their_loads:
        return
    threads = sum(launch["threads"] for launch in launches)
    per_thread = 32 * mine / max(threads, 1)  # every warp is full on whole tiles: 32 loads per instruction
    busiest = max(lines(launches, "global", "load"), key=lambda line: line["requests"])
    raise CheckFailure(
        f"on a {M} x {K} times {K} x {N} product, your kernels issued {mine} global load instructions (warp-level; "
        f"about {per_thread:.0f} elements per thread), {mine / their_loads:.1f} times the reference's {their_loads} "
        f"({2 * math.ceil(K / TILE)} elements per thread); the busiest is {where(busiest)} with "
        f"{busiest['requests']}. Tiles of side TILE = {TILE} load each element of a ceil(N / TILE) = "
        f"{math.ceil(N / TILE)} times and each of b ceil(M / TILE) = {math.ceil(M / TILE)} times, "
        f"{tile_reads(M, N, K, TILE, TILE)} loads in all; reading a row of a and a column of b from global "
        f"memory in every thread loads each element of a N = {N} times, {tile_reads(M, N, K, 1, 1)} loads. Stage "
        f"the tiles in shared memory (one element of each per thread and step) and read the TILE products of a "
        f"step from there. (Shared-memory requests: {total(launches, 'shared', 'requests')}.)")
