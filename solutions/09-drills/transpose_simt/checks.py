"""Checks: a tiled float32 transpose in the thread-level dialect, right, coalesced, without bank conflicts or races.

The values check compares with numpy, bit for bit: visible cases two small shapes; hidden ones single
rows and columns, one element, an empty matrix, ragged and whole tiles, and a property check of shapes up to
40 x 40 drawn by hypothesis (few: the simulator is slow), the first failing one shrunk to the smallest. The
pattern checks run the student's function in the clean room's simulator and compare its launch reports
with the reference's (aisys.cuda_kernels.transpose) on the same matrix.
"""

from functools import cache

import numpy as np
from hypothesis import strategies as st

from aisys.cuda_kernels import transpose as reference
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import (efficiency, errors_message, least_efficient, lines, profiled, reference_launches,
                                   total, where)

PATTERN_SHAPE = (64, 32)  # whole tiles: every row of a tile starts on a sector, so a coalesced kernel scores 100 %
RAGGED_SHAPE = (33, 65)  # ragged tiles both ways: where a misplaced bounds check or barrier shows


def _matrix(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _truth(a):
    return np.ascontiguousarray(a.T)


@st.composite
def _matrices(draw) -> dict:
    shape = (draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    return {"a": np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape).astype(np.float32)}


@check(points=3)
def transpose(student, rng, hidden):
    """transpose(a) returns a.T exactly, float32, for any shape: ragged tiles, single rows and columns, empty."""
    shapes = [(3, 5), RAGGED_SHAPE]
    if hidden:
        shapes = [(1, 1), (1, 37), (37, 1), (0, 4), PATTERN_SHAPE, RAGGED_SHAPE]
    cases = [{"a": _matrix(rng, shape)} for shape in shapes]
    compare_cases(student, "transpose", cases, _truth, returns="array", hidden=hidden, tolerance=(0, 0),
                  dtype="float32")
    if hidden:
        compare_property(student, "transpose", _matrices(), _truth, rng=rng, returns="array", hidden=hidden,
                         examples=6, tolerance=(0, 0), dtype="float32")


@cache
def _reference_launches(shape: tuple) -> list[dict]:
    """The reference's launch reports on a float32 matrix of `shape` (they do not depend on the values)."""
    return reference_launches(reference.transpose, np.zeros(shape, np.float32))


def _student_launches(student, rng, shape) -> list[dict]:
    return profiled(student, "transpose", a=_matrix(rng, shape), returns="array")[1]


@check(points=2)
def transpose_coalesced(student, rng, hidden):
    """Loads and stores are coalesced: global-memory efficiency at least 90 % of the reference's."""
    launches = _student_launches(student, rng, PATTERN_SHAPE)
    mine, theirs = efficiency(launches), efficiency(_reference_launches(PATTERN_SHAPE))
    if mine >= 0.9 * theirs:
        return
    worst = least_efficient(launches)
    raise CheckFailure(
        f"on a {PATTERN_SHAPE[0]} x {PATTERN_SHAPE[1]} matrix, {mine:.0%} of the bytes your kernels moved between "
        f"global memory and the chip were bytes they used (the reference: {theirs:.0%}). The worst access is "
        f"{where(worst)} ({worst['kind']}): {worst['sectors']} sectors of 32 bytes where {worst['ideal_sectors']} "
        f"would hold the data. When the 32 lanes of a warp touch 32 different rows, each lane costs a whole sector; "
        f"stage the tile in shared memory so that lanes with consecutive threadIdx.x read AND write consecutive "
        f"elements of a row")


@check(points=2)
def transpose_no_bank_conflicts(student, rng, hidden):
    """Shared-memory accesses have no more bank conflicts than the reference's padded tile (none)."""
    launches = _student_launches(student, rng, PATTERN_SHAPE)
    mine = total(launches, "shared", "bank_conflicts")
    theirs = total(_reference_launches(PATTERN_SHAPE), "shared", "bank_conflicts")
    if mine <= theirs:
        return
    worst = max(lines(launches, "shared"), key=lambda line: line["bank_conflicts"])
    raise CheckFailure(
        f"on a {PATTERN_SHAPE[0]} x {PATTERN_SHAPE[1]} matrix, your shared-memory accesses had {mine} bank "
        f"conflicts (the reference: {theirs}). The worst is {where(worst)} ({worst['kind']}): "
        f"{worst['wavefronts']} wavefronts for {worst['requests']} warp instructions. In a tile of 32 columns a "
        f"column lies in one bank; pad each row by one element, a (TILE, TILE + 1) tile, and a column spans all "
        f"32 banks")


@check(points=1)
def transpose_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, on ragged tiles and whole ones."""
    for shape in (RAGGED_SHAPE, PATTERN_SHAPE):
        error = errors_message(_student_launches(student, rng, shape))
        if error:
            raise CheckFailure(
                f"on a {shape[0]} x {shape[1]} matrix, {error}. Every thread of a block must pass "
                f"cuda.syncthreads() between writing the tile and reading what other threads wrote, and every "
                f"thread must reach the same barriers (none inside an `if` that some threads skip)")
