"""Checks: a block-level tree sum in shared memory, one atomic per block, read from the launch report.

The value is compared with the exact sum (float64) within 1e-5 of the sum of |x|. Hidden cases add the
edges: no element, one, a warp and a block either side, several ragged blocks, mixed signs, and a property
check on random lengths (up to two blocks, shrunk to the smallest failing one). The report checks run the
student's reduce_sum in the simulator and compare its reports with the reference tree's
(aisys.cuda_kernels.reduction.block_sums_tree: the same loads, levels and block size) on the same length.
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import reduction as reference

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import efficiency, errors_message, least_efficient, lines, profiled, reference_launches, \
    total, where

BLOCK = reference.BLOCK  # the notebook fixes the same block size
RTOL_OF_ABS_SUM = 1e-5  # the tolerance, as a fraction of sum(|x|)
DIVERGENCE_ALLOWED = 2  # divergent branches, as a multiple of the reference's
PATTERN_SIZE = 4 * BLOCK  # whole blocks: what is compared is the tree, not the ragged edge

# Lengths up to just past two blocks; values small integers and halves, so sums of them are exact in float32.
ARRAYS = hnp.arrays(np.float32, st.integers(1, 2 * BLOCK + 3), elements=st.integers(-8, 8).map(lambda v: v / 2))


def _sum(x):
    return np.float32(np.sum(x, dtype=np.float64))


def _tolerance(case) -> tuple:
    return 0.0, RTOL_OF_ABS_SUM * float(np.abs(case["x"]).sum(dtype=np.float64)) + 1e-30


def _values(rng, n) -> np.ndarray:
    return rng.uniform(-1, 1, n).astype(np.float32)


@check(points=2)
def reduce_sum(student, rng, hidden):
    """reduce_sum(x) returns the float32 sum of x, for any length, ragged last blocks included."""
    sizes = [5, 256, 1000]
    if hidden:
        sizes = [0, 1, 31, 255, 257, 3 * BLOCK + 1, int(rng.integers(2, 4 * BLOCK))]
    cases = [{"x": _values(rng, n)} for n in sizes]
    if hidden:  # large magnitudes that cancel: an element lost or counted twice shows at once
        cases.append({"x": (rng.choice([-1.0, 1.0], 600) * rng.uniform(1e3, 1e4, 600)).astype(np.float32)})
    compare_cases(student, "reduce_sum", cases, _sum, returns="number", hidden=hidden, tolerance=_tolerance)
    if hidden:
        compare_property(student, "reduce_sum", st.fixed_dictionaries({"x": ARRAYS}), _sum, rng=rng,
                         returns="number", hidden=hidden, tolerance=_tolerance, examples=12)


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference tree's reports on n float32 elements (they do not depend on the values)."""
    return reference_launches(reference.block_sums_tree, np.ones(n, np.float32))


def _launches(student, rng, n: int) -> list[dict]:
    """The student's reports on n float32 elements; CheckFailure on a race, a barrier error or a wrong sum."""
    x = _values(rng, n)
    value, launches = profiled(student, "reduce_sum", x=x, returns="number")
    if error := errors_message(launches):
        raise CheckFailure(
            f"on {n} float32 elements, {error}. Each level of the tree reads what other threads wrote at the "
            f"level before: cuda.syncthreads() belongs after the loads and between the levels, inside the loop, "
            f"and every thread must reach each barrier (threads past the end store 0 rather than return)")
    if abs(float(value) - float(_sum(x))) > _tolerance({"x": x})[1]:
        raise CheckFailure(f"on {n} float32 elements, reduce_sum returned a wrong sum (the check `reduce_sum` says "
                           f"more); its launch reports are graded only when it is right")
    return launches


@check(points=1)
def reduce_sum_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, with a ragged last block too."""
    n = 4 * BLOCK - int(rng.integers(1, BLOCK)) if hidden else 1000
    _launches(student, rng, n)


@check(points=2)
def reduce_sum_sequential_addressing(student, rng, hidden):
    """Sequential addressing, as the report shows it: coalesced loads, whole warps busy or idle together, no bank
    conflicts."""
    n = PATTERN_SIZE
    launches, theirs = _launches(student, rng, n), _reference_launches(n)
    mine_efficiency, their_efficiency = efficiency(launches), efficiency(theirs)
    if mine_efficiency < 0.9 * their_efficiency:
        worst = least_efficient(launches)
        raise CheckFailure(
            f"on {n} float32 elements, {mine_efficiency:.0%} of the bytes your kernel moved between global memory "
            f"and the chip were bytes it used (the reference: {their_efficiency:.0%}); the worst access is "
            f"{where(worst)}: {worst['sectors']} sectors of 32 bytes where {worst['ideal_sectors']} would hold the "
            f"data. Thread t of block b loads element b * BLOCK + t: a warp then reads 32 consecutive floats")

    mine, theirs_divergent = total(launches, "branches", "divergent"), total(theirs, "branches", "divergent")
    if mine > DIVERGENCE_ALLOWED * theirs_divergent:
        worst = max(lines(launches, "branch"), key=lambda line: line["divergent"])
        raise CheckFailure(
            f"on {n} float32 elements ({n // BLOCK} blocks of {BLOCK}), the lanes of a warp went different ways "
            f"at a branch {mine} times (the reference: {theirs_divergent}), {worst['divergent']} of them at "
            f"{where(worst)}. A diverging warp runs both paths, its idle lanes masked off. With interleaved "
            f"addressing (busy threads 0, 2s, 4s, ...) every warp has busy and idle lanes at every level; keep "
            f"the busy threads contiguous instead: for s = BLOCK // 2, ..., 1, `if t < s: sdata[t] += "
            f"sdata[t + s]`, so whole warps work or idle together until s < 32")

    conflicts, their_conflicts = total(launches, "shared", "bank_conflicts"), total(theirs, "shared", "bank_conflicts")
    if conflicts > their_conflicts:
        worst = max(lines(launches, "shared"), key=lambda line: line["bank_conflicts"])
        ways = worst["wavefronts"] / max(worst["requests"], 1)
        raise CheckFailure(
            f"on {n} float32 elements, your shared-memory accesses had {conflicts} bank conflicts (the reference: "
            f"{their_conflicts}), {worst['bank_conflicts']} at {where(worst)}, {ways:.1f}-way on average. Shared "
            f"memory has 32 banks of 4 bytes, word k in bank k % 32: when thread t works on word 2 * s * t, the "
            f"lanes of a warp are 2s words apart and meet 2s to a bank. With sequential addressing lane t reads "
            f"words t and t + s: 32 consecutive words, one per bank")


@check(points=1)
def reduce_sum_one_atomic_per_block(student, rng, hidden):
    """Each block adds its sum to the total with one global atomic: the atomics take turns on one address."""
    n = 4 * BLOCK - int(rng.integers(1, BLOCK)) if hidden else 1000
    launches = _launches(student, rng, n)
    blocks = sum(math.prod(launch["grid"]) for launch in launches)
    atomics = sum(line["operations"] for line in lines(launches, "global", "atomic"))
    if atomics > blocks:
        raise CheckFailure(
            f"on {n} float32 elements, your kernels made {atomics} atomic additions to global memory in {blocks} "
            f"blocks, more than one per block. Atomics on one address are served one after another (and each "
            f"float32 addition to one large total rounds): add in the block's tree first, then let thread 0 add "
            f"the block's sum with a single cuda.atomic.add(out, 0, sdata[0])")
