"""Checks: a tiled transpose, right, coalesced, without bank conflicts or races.

The correctness check compares with numpy on both dtypes, the result in a's
dtype; hidden cases cover 1 x 1, single rows and columns, shapes one short of
and one past a tile, and seeded ragged ones. The pattern checks run the student's function in the
simulator and compare its launch reports with the reference's on the same
input.
"""

from functools import cache

import numpy as np

from aisys.cuda_kernels import transpose as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import (efficiency, errors_message, least_efficient, lines, profiled, reference_launches,
                                   total, where)


# Full tiles only: every row of a tile starts on a 32-byte sector, so a coalesced kernel scores 100 %.
PATTERN_SHAPE = (64, 96)
# Ragged tiles in both directions: where a missing or misplaced bounds check or barrier shows.
RAGGED_SHAPE = (33, 65)


def _matrix(rng, shape, dtype) -> np.ndarray:
    if np.dtype(dtype) == np.int32:
        return rng.integers(-2**31, 2**31, size=shape, dtype=np.int32)
    return rng.standard_normal(shape).astype(np.float32)


def _truth(a):
    return np.ascontiguousarray(a.T)


@check(points=3)
def transpose(student, rng, hidden):
    """transpose(a) returns a.T exactly, for float32 and int32 of any shape, ragged tiles included."""
    shapes = [(4, 6), (33, 65), (1, 37)]
    if hidden:
        shapes = [(1, 1), (1, 37), (37, 1), (31, 32), (32, 33), (100, 31), (257, 129)]
        shapes += [tuple(int(s) for s in rng.integers(1, 80, size=2)) for _ in range(2)]
    cases = [{"a": _matrix(rng, shape, dtype)} for shape in shapes for dtype in (np.float32, np.int32)
             if not (hidden and shape == (257, 129) and dtype == np.int32)]  # the large one once
    compare_cases(student, "transpose", cases, _truth, returns="array", hidden=hidden, tolerance=(0, 0),  # moves bits
                  dtype="reference")


@cache
def _reference_launches(shape: tuple) -> list[dict]:
    """The reference's launch reports on a float32 matrix of `shape` (they do not depend on the values)."""
    return reference_launches(reference.transpose, np.zeros(shape, np.float32))


def _student_launches(student, a) -> list[dict]:
    return profiled(student, "transpose", a=a, returns="array")[1]


@check(points=2)
def transpose_coalesced(student, rng, hidden):
    """Loads and stores are coalesced: global-memory efficiency as high as the reference's."""
    shape = PATTERN_SHAPE
    launches = _student_launches(student, _matrix(rng, shape, np.float32))
    mine, theirs = efficiency(launches), efficiency(_reference_launches(shape))
    if mine >= 0.9 * theirs:
        return
    worst = least_efficient(launches)
    per_request = worst["sectors"] / max(worst["requests"], 1)
    raise CheckFailure(
        f"on a {shape[0]} x {shape[1]} float32 matrix, {mine:.0%} of the bytes your kernels moved between "
        f"global memory and the chip were bytes they used (the reference: {theirs:.0%}). The worst access is "
        f"{where(worst)} ({worst['kind']}): {worst['sectors']} sectors of 32 bytes where {worst['ideal_sectors']} "
        f"would hold the data, {per_request:.1f} sectors per warp instruction. When the 32 lanes of a warp touch "
        f"32 different rows, each lane costs a whole sector; stage the tile in shared memory so that lanes "
        f"with consecutive threadIdx.x read AND write consecutive elements of a row")


@check(points=2)
def transpose_no_bank_conflicts(student, rng, hidden):
    """Shared-memory accesses are free of bank conflicts, as in the reference (the padded tile)."""
    shape = PATTERN_SHAPE
    launches = _student_launches(student, _matrix(rng, shape, np.float32))
    mine = total(launches, "shared", "bank_conflicts")
    theirs = total(_reference_launches(shape), "shared", "bank_conflicts")
    if mine <= theirs:
        return
    worst = max(lines(launches, "shared"), key=lambda line: line["bank_conflicts"])
    ways = worst["wavefronts"] / max(worst["requests"], 1)
    raise CheckFailure(
        f"on a {shape[0]} x {shape[1]} float32 matrix, your shared-memory accesses had {mine} bank conflicts "
        f"(the reference: {theirs}). The worst is {where(worst)} ({worst['kind']}): {worst['wavefronts']} "
        f"wavefronts for {worst['requests']} warp instructions, {ways:.1f}-way on average. Shared memory has 32 "
        f"banks of 4 bytes; in a tile of 32 columns, a column lies in one bank, so a warp reading a column is "
        f"served one lane at a time. Pad each row by one element, a (TILE, TILE + 1) tile, and a column spans all "
        f"banks")


@check(points=1)
def transpose_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, on ragged tiles too."""
    for shape in (RAGGED_SHAPE, PATTERN_SHAPE):
        error = errors_message(_student_launches(student, _matrix(rng, shape, np.float32)))
        if error:
            raise CheckFailure(
                f"on a {shape[0]} x {shape[1]} float32 matrix, {error}. Every thread of a block must pass "
                f"cuda.syncthreads() between writing the tile and reading what other threads wrote, and every "
                f"thread must reach the same barriers (none inside an `if` that some threads skip)")
