"""Checks: exact counts, privatised bins in shared memory, no races.

The correctness check compares with np.bincount, in an integer array; hidden
cases cover no input, one element, odd sizes, one bin and 256, skewed data
(every element in one bin, the worst case for atomics) and one large input.
Counts that add up to more or fewer than the number of values say what went
wrong, and the message says it. The pattern checks run
the student's function in the simulator and compare its launch reports with
the reference's on the same input.
"""

import math
from functools import cache

import numpy as np

from aisys.cuda_kernels import histogram as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, unredacted
from aisys_grader.launches import errors_message, lines, profiled, reference_launches, where


# Many elements per bin, so that one global atomic per element and one per bin per block differ 30-fold.
PATTERN_CASE = (16_389, 16)  # (n, bins)
# Ragged: bins not a multiple of a warp, n not a multiple of a block.
RACE_CASE = (3_001, 100)
GARBAGE = 1024  # a count over this many times the true one was never zeroed: no loop counts an element that often
ALLOWED = 4  # global atomics, as a multiple of the reference's: room for a larger grid, not one per element


def _values(rng, n, bins, skewed=False) -> np.ndarray:
    if skewed:
        return np.full(n, int(rng.integers(0, bins)), np.int32)
    return rng.integers(0, bins, size=n, dtype=np.int32)


def _truth(values, bins):
    return np.bincount(values, minlength=bins)


@check(points=3)
def histogram(student, rng, hidden):
    """histogram(values, bins) returns exact counts, as np.bincount(values, minlength=bins) does."""
    cases = [(1000, 10, False), (1, 1, False), (777, 256, False), (500, 3, True)]
    if hidden:
        cases = [(0, 5, False), (1, 1, False), (31, 7, False), (33, 32, False), (257, 33, True),
                 (1000, 1, False), (4_097, 256, True), (2**16 + 7, 256, False)]
        cases += [(int(rng.integers(2, 3000)), int(rng.integers(1, 257)), False) for _ in range(2)]
    cases = [{"values": _values(rng, n, bins, skewed), "bins": bins} for n, bins, skewed in cases]
    compare_cases(student, "histogram", cases, _truth, returns="array", hidden=hidden, compare=_counts, hint=_hint)


def _counts(got, expected, case) -> None:
    """Counts are integers (any integer dtype: np.bincount's is int64, a kernel's int32) equal to np.bincount's."""
    if isinstance(got, np.ndarray) and got.dtype.kind not in "iu":
        raise CheckFailure(f"result: expected an integer array of counts, got dtype {got.dtype}")
    assert_close(got, expected)


def _hint(case, got, expected) -> str:
    """What the counts show: a float dtype, bins never zeroed, elements counted twice or never."""
    n = case["values"].size
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return ""
    if got.dtype.kind not in "iu":
        return "Count in int32, in shared memory and in the result: a float count is not a count"
    if (got < 0).any() or (got > GARBAGE * expected).any():
        return ("Some counts are below 0 or far above their bins' true counts: the bins started from whatever "
                "shared memory held. Zero them, then cuda.syncthreads(), before counting")
    total = int(got.sum())
    counted = unredacted(f" ({total} for {n} values)")
    if total > n:
        return (f"Your counts add up to more than there are values{counted}: elements were counted more than "
                f"once. A grid-stride loop steps by the whole grid, cuda.gridsize(1) = gridDim.x * blockDim.x, "
                f"not blockDim.x: then no two threads meet on an element")
    if total < n:
        return (f"Your counts add up to fewer than there are values{counted}: counts were lost, or elements "
                f"skipped. Zero the bins and cuda.syncthreads() before counting, add with cuda.atomic.add, and "
                f"let the loop reach every element")
    return ""


@cache
def _reference_launches(n: int, bins: int, seed: int) -> list[dict]:
    """The reference's launch reports on the values the student gets from `seed`."""
    return reference_launches(reference.histogram, _values(np.random.default_rng(seed), n, bins), bins)


def _student_launches(student, values, bins) -> list[dict]:
    return profiled(student, "histogram", values=values, bins=bins, returns="array")[1]


def _global_atomics(launches) -> tuple[int, dict | None]:
    """Global atomic operations (one per active lane) of all launches, and the line issuing most of them."""
    atomics = lines(launches, "global", "atomic")
    return sum(line["operations"] for line in atomics), max(atomics, key=lambda line: line["operations"], default=None)


@check(points=2)
def histogram_privatised(student, rng, hidden):
    """Each block counts into its own bins in shared memory: about blocks x bins global atomics, not one per element."""
    n, bins = PATTERN_CASE
    seed = int(rng.integers(2**31))
    launches = _student_launches(student, _values(np.random.default_rng(seed), n, bins), bins)
    mine, line = _global_atomics(launches)
    theirs, _ = _global_atomics(_reference_launches(n, bins, seed))
    if mine <= ALLOWED * theirs:
        return
    blocks = sum(math.prod(launch["grid"]) for launch in launches)
    raise CheckFailure(
        f"on {n} values in {bins} bins ({blocks} blocks), your kernels made {mine} atomic additions to global memory, "
        f"the reference {theirs}; most came from {where(line)}. Atomics on one address are serialised, and in "
        f"global memory each is a round trip to the L2 cache: count each block's elements into bins in shared "
        f"memory (cuda.shared.array) with shared atomics, then add each bin to the global counts once per block, "
        f"blocks x bins = {blocks * bins} global atomic additions in all")


@check(points=1)
def histogram_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error (atomics do not race)."""
    n, bins = RACE_CASE
    for skewed in (False, True):
        error = errors_message(_student_launches(student, _values(rng, n, bins, skewed), bins))
        if error:
            raise CheckFailure(
                f"on {n} {'equal ' if skewed else ''}values in {bins} bins, {error}. Threads that add to one bin "
                f"must do so with cuda.atomic.add (a plain `+=` reads, adds and writes: two threads can read the "
                f"same old count); and a barrier (cuda.syncthreads) must separate zeroing the bins from counting, "
                f"and counting from reading the bins, with every thread of the block reaching it")
