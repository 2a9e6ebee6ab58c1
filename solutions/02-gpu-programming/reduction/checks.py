"""Checks: block sums by a shared-memory tree, by shuffles, and a whole sum.

Correctness checks compare with numpy: exactly for int32 and int64, to float32
precision for float32 (numpy adds in another order), and block sums in x's
dtype. Hidden cases cover one element, either side of a warp, ragged blocks,
every dtype at every size. Two cases are the same on every seed: int32 values
whose block sums need more than float32's 24 bits, and (in reduce_sum) 2**14 + 7
copies of 0.1, whose sum drifts by 1.5e-4 when one float32 accumulator adds them
one by one (an atomicAdd per element), 2.4e-6 when each of 64 threads adds 257
of them, and less in a tree: it is held to 2e-5. The pattern checks run
the student's function in the simulator and compare its launch reports with the
reference's on the same input: the lesson of each stage is in how it runs, not
only in what it returns.
"""

import math
from functools import cache

import numpy as np

from aisys.cuda_kernels import reduction as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, tolerance, unredacted
from aisys_grader.launches import (efficiency, errors_message, first_error, least_efficient, lines, profiled,
                         reference_launches, total, where)


BLOCK = reference.BLOCK  # elements per block sum; the notebook fixes the same number
DTYPES = (np.float32, np.int32, np.int64)
EDGE_SIZES = (1, 31, 32, 33, 1000)  # one element, either side of a warp, a ragged last block
BIG = 2**14 + 7  # graded in reduce_sum only: 65 blocks, 2 elements for each thread of a first pass of 32 x 256
EQUAL_VALUE = 0.1  # reduce_sum's long case: BIG copies of it (not exact in float32, so each addition rounds)
EQUAL_RTOL = 2e-5  # their sum's tolerance: 8 threads adding 2049 each drift 1.6e-5; one total adding all, 1.5e-4
DIVERGENCE_ALLOWED = 2  # divergent branches, as a multiple of the reference's (sequential addressing)
PROFILE_SIZE = 12_000  # reduce_sum's pattern check: 1.5 to 3 elements per thread of a first pass of 32 x 256
ROUNDING = 1e-4  # integer sums off by less than this fraction of the sum of |x| were rounded, not mis-added
SHARED_ALLOWED = 1.2  # shared-memory requests in stage 2, as a multiple of the reference's


def _data(rng, n, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.int32:
        return rng.integers(-1000, 1000, size=n, dtype=np.int32)  # no sum of them nears 2**31
    if dtype == np.int64:
        return rng.integers(-2**35, 2**35, size=n, dtype=np.int64)  # a block's sum overflows int32; float32 rounds it
    return rng.random(n, dtype=np.float32)  # positive: no cancellation, so float32 precision is relative to the sum


def _wide_int32() -> np.ndarray:
    """The same on every seed: block sums near 2**30, which float32 (24 bits) rounds and int32 holds exactly."""
    return np.random.default_rng(17).integers(2**21, 2**22, size=500, dtype=np.int32)  # the total stays below 2**31


def _equal_values() -> np.ndarray:
    """The same on every seed: one float32 accumulator adding these one by one drifts 1.5e-4 off the sum; a
    tree stays within float32's precision. (Their sum also counts the additions: see _sum_hint.)"""
    return np.full(BIG, EQUAL_VALUE, np.float32)


def _block_sums(x):
    """The sum of each BLOCK-element chunk of x, in x's dtype (floats added in float64, then rounded)."""
    padded = np.zeros(-(-x.size // BLOCK) * BLOCK, x.dtype)
    padded[:x.size] = x
    if x.dtype.kind == "f":
        return padded.reshape(-1, BLOCK).sum(axis=1, dtype=np.float64).astype(x.dtype)
    return padded.reshape(-1, BLOCK).sum(axis=1, dtype=x.dtype)


def _sum(x):
    if x.dtype.kind == "f":
        return x.dtype.type(x.sum(dtype=np.float64))
    return x.sum(dtype=x.dtype)


def _tolerance(case) -> tuple:
    """float32 results to float32 precision (a number result would be held to float64's), integers exactly; the
    sum of equal values within EQUAL_RTOL, since their roundings do not cancel."""
    x = case["x"]
    if x.dtype.kind != "f":
        return None, None
    return (EQUAL_RTOL, 0.0) if x.size > 1 and (x == x[0]).all() else tolerance(np.float32)


def _correctness_cases(rng, hidden, big=False) -> list[np.ndarray]:
    sizes = [(1000, np.float32), (33, np.int32), (300, np.int64)]
    if hidden:
        sizes = [(n, dtype) for n in EDGE_SIZES for dtype in DTYPES]
        sizes += [(int(rng.integers(2, 1500)), dtype) for dtype in DTYPES]
    # First the long float32 sum, whose hint reads the most from a wrong result; then the wide integers.
    return ([_equal_values()] if big else []) + [_data(rng, n, dtype) for n, dtype in sizes] + [_wide_int32()]


def _block_sums_hint(case, got, expected) -> str:
    """What a wrong result of block sums shows: a tree one level short, or integers rounded through float32."""
    x = case["x"]
    if not isinstance(got, np.ndarray) or got.shape != expected.shape or x.size == 0:
        return ""
    if got.dtype != expected.dtype:
        return "Block sums keep the dtype of x: make the result, and the shared array, of x.dtype"
    rtol, atol = _tolerance(case)
    blocks = np.zeros(got.size * BLOCK, np.float64)
    blocks[:x.size] = x
    blocks = blocks.reshape(-1, BLOCK)
    for part, said in ((blocks[:, ::2], "the block's even-indexed elements only: the tree (or the shuffles) "
                                       "stopped one level short. Its last level, s = 1 (a shuffle's offset 1), "
                                       "adds each odd neighbour in: loop while s > 0"),
                       (blocks[:, :BLOCK // 2], "the first half of the block only: the tree started one level "
                                                "short. Its first level is s = BLOCK // 2")):
        if np.allclose(got.astype(np.float64), part.sum(axis=1), rtol=rtol or 0, atol=atol or 0):
            return f"Each of your block sums is the sum of {said}"
    error = np.abs(got.astype(np.float64) - expected)
    if x.dtype.kind == "i" and (error <= ROUNDING * np.abs(blocks).sum(axis=1)).all():
        return _ROUNDED
    return ""


_ROUNDED = ("Close, but integer sums must be exact: these were rounded, as float32 (24 bits of mantissa) rounds "
            "integers past 2**24. Keep x's dtype in the shared array, the accumulator and the result")


def _sum_hint(case, got, expected) -> str:
    """What a wrong sum shows: on equal values, how many additions it holds; integers rounded through float32."""
    x = case["x"]
    if not isinstance(got, (int, float)):
        return ""
    if x.size > 1 and x[0] != 0 and (x == x[0]).all():
        count = float(got) / float(x[0])  # how many of the values the sum holds
        held = unredacted(f" (about {count:.0f})")
        if count > 1.01 * x.size:  # a drift of rounding stays well within 1 %
            return (f"On equal values your sum holds more of them than there are{held}: elements were added more "
                    f"than once. A grid-stride loop steps by the whole grid, cuda.gridsize(1) = gridDim.x * "
                    f"blockDim.x, not blockDim.x: then no two threads meet on an element")
        if count < 0.99 * x.size:
            return (f"On equal values your sum holds fewer of them than there are{held}: some elements were "
                    f"never added (a tree or shuffle loop one level short, or partial sums left out)")
        if x.dtype.kind == "f":
            return ("On equal values your sum drifted: every addition to one large float32 total rounds, the "
                    "same way each time (an atomicAdd per element, or one thread adding everything). Add each "
                    "thread's few elements in a register, then the partial sums in a tree: the error then grows "
                    "with log n, not n")
    if x.dtype.kind == "i" and abs(float(got) - float(expected)) <= ROUNDING * np.abs(x.astype(np.float64)).sum():
        return _ROUNDED
    return ""


# Reports ------------------------------------------------------------------------------------------------------------

ERROR_ADVICE = {  # what to change, by the kind of the first report error
    "race": "In a reduction, each level of the tree reads what other threads wrote at the level before: "
            "cuda.syncthreads() belongs between the levels, inside the loop. In the last warp, pass values with "
            "cuda.shfl_down_sync instead: since Volta the lanes of a warp do not run in lockstep, so shared memory "
            "without a barrier is a race there too",
    "barrier": "A thread past the end of x must not `return` early: let it store 0 into shared memory and take part "
               "in the tree like the others",
    "warp": "Let the whole warp call each shuffle, outside any `if` that splits it, with the mask 0xFFFFFFFF",
}


@cache
def _reference_launches(function: str, n: int) -> list[dict]:
    """The reference's launch reports on float32 data of length n (they do not depend on the values)."""
    return reference_launches(getattr(reference, function), np.ones(n, np.float32))


def _student_launches(student, function, rng, n, truth, *, errors=True) -> list[dict]:
    """The student's launch reports on float32 data of length n; CheckFailure unless the value is right
    (and, with `errors`, unless the reports are free of races and barrier errors)."""
    x = _data(rng, n, np.float32)
    value, launches = profiled(student, function, x=x, returns="any")
    if errors and (error := errors_message(launches)):  # first: a race or a missed barrier explains a wrong result
        advice = ERROR_ADVICE.get(first_error(launches)[1]["kind"], "")
        raise CheckFailure(f"on {n} float32 elements, {error}. {advice}")
    expected = truth(x)
    rtol, atol = tolerance(np.float32)
    if not np.allclose(np.asarray(value, dtype=np.float64), np.float64(expected), rtol=rtol, atol=atol) or (
            np.shape(value) != np.shape(expected)):
        raise CheckFailure(f"on {n} float32 elements, {function} returned a wrong result (the check `{function}` "
                           "says more); its launch reports are graded only when it is right")
    return launches


def _coalesced(launches, their_launches, n, function) -> None:
    mine, theirs = efficiency(launches), efficiency(their_launches)
    if mine >= 0.9 * theirs:
        return
    worst = least_efficient(launches)
    raise CheckFailure(
        f"on {n} float32 elements, {mine:.0%} of the bytes {function}'s kernels moved between global memory and "
        f"the chip were bytes they used (the reference: {theirs:.0%}). The worst access is {where(worst)} "
        f"({worst['kind']}): {worst['sectors']} sectors of 32 bytes where {worst['ideal_sectors']} would hold the "
        f"data. The 32 lanes of a warp should read 32 consecutive elements in each step (element i for thread i, "
        f"then i + the number of threads in the grid); a contiguous chunk per thread puts the lanes a chunk apart, "
        f"each lane in its own sector")


# Stage 1 ------------------------------------------------------------------------------------------------------------

@check(points=2)
def block_sums_tree(student, rng, hidden):
    """block_sums_tree(x) returns the sum of each BLOCK-element chunk of x, for float32, int32 and int64."""
    cases = [{"x": x} for x in _correctness_cases(rng, hidden)]
    compare_cases(student, "block_sums_tree", cases, _block_sums, returns="array", hidden=hidden, tolerance=_tolerance,
                  dtype="reference", hint=_block_sums_hint)


@check(points=3)
def block_sums_tree_sequential(student, rng, hidden):
    """Sequential addressing: coalesced loads, whole warps busy or idle together, no bank conflicts."""
    n = int(rng.integers(3 * BLOCK + 1, 4 * BLOCK + 1)) if hidden else 4 * BLOCK
    launches = _student_launches(student, "block_sums_tree", rng, n, _block_sums, errors=False)
    theirs = _reference_launches("block_sums_tree", n)
    _coalesced(launches, theirs, n, "block_sums_tree")

    mine_divergent, their_divergent = total(launches, "branches", "divergent"), total(theirs, "branches", "divergent")
    if mine_divergent > DIVERGENCE_ALLOWED * their_divergent:
        worst = max(lines(launches, "branch"), key=lambda line: line["divergent"])
        raise CheckFailure(
            f"on {n} float32 elements ({-(-n // BLOCK)} blocks of {BLOCK} threads), the lanes of a warp went "
            f"different ways at a branch {mine_divergent} times (the reference: {their_divergent}), "
            f"{worst['divergent']} of them at {where(worst)}. A warp that diverges runs both paths one after the "
            f"other, its idle lanes masked off. With interleaved addressing (the busy threads are 0, 2s, 4s, ...) "
            f"half the lanes of every warp idle at the first level and every working warp diverges at each level "
            f"after. Keep the busy threads contiguous instead: for s = BLOCK // 2, ..., 1, `if tid < s: "
            f"sdata[tid] += sdata[tid + s]`; whole warps then work or idle together until s < 32")

    mine_conflicts = total(launches, "shared", "bank_conflicts")
    their_conflicts = total(theirs, "shared", "bank_conflicts")
    if mine_conflicts > their_conflicts:
        worst = max(lines(launches, "shared"), key=lambda line: line["bank_conflicts"])
        raise CheckFailure(
            f"on {n} float32 elements, your shared-memory accesses had {mine_conflicts} bank conflicts (the "
            f"reference: {their_conflicts}), {worst['bank_conflicts']} at {where(worst)} ({worst['kind']}: "
            f"{worst['wavefronts']} wavefronts for {worst['requests']} warp instructions). Shared memory has 32 "
            f"banks of 4 bytes: word k is in bank k % 32. When thread tid works on word 2 * s * tid, the lanes of "
            f"a warp are 2s words apart and land 2s to a bank (2-way at s = 1, 4-way at s = 2, ...), and the bank "
            f"serves them one after the other. With sequential addressing, lane tid reads words tid and tid + s: "
            f"32 consecutive words, one per bank")


@check(points=1)
def block_sums_tree_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error, with a ragged last block too."""
    n = 4 * BLOCK - int(rng.integers(1, BLOCK)) if hidden else 1000
    _student_launches(student, "block_sums_tree", rng, n, _block_sums)


# Stage 2 ------------------------------------------------------------------------------------------------------------

@check(points=2)
def block_sums_shuffle(student, rng, hidden):
    """block_sums_shuffle(x) returns the same block sums as block_sums_tree, for float32, int32 and int64."""
    cases = [{"x": x} for x in _correctness_cases(rng, hidden)]
    compare_cases(student, "block_sums_shuffle", cases, _block_sums, returns="array", hidden=hidden,
                  tolerance=_tolerance, dtype="reference", hint=_block_sums_hint)


@check(points=2)
def block_sums_shuffle_warp(student, rng, hidden):
    """The last 32 values are added in registers with warp shuffles: no race, no extra shared-memory traffic."""
    n = 4 * BLOCK - int(rng.integers(1, BLOCK)) if hidden else 1000
    launches = _student_launches(student, "block_sums_shuffle", rng, n, _block_sums)
    theirs = _reference_launches("block_sums_shuffle", n)
    mine_requests, their_requests = total(launches, "shared", "requests"), total(theirs, "shared", "requests")
    if mine_requests > SHARED_ALLOWED * their_requests:
        raise CheckFailure(
            f"on {n} float32 elements, your kernels made {mine_requests} shared-memory requests (warp "
            f"instructions), {mine_requests / their_requests:.1f} times the reference's {their_requests}. Once "
            f"the tree is down to 32 values, one warp does all the work: load them into registers "
            f"(v = sdata[tid] for tid < 32) and add them with `v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)` "
            f"for offset = 16, 8, 4, 2, 1. Lane i reads lane i + offset's register directly: no shared memory, "
            f"no block-wide barrier, and lane 0 ends with the block's sum")
    mine_conflicts = total(launches, "shared", "bank_conflicts")
    if mine_conflicts > total(theirs, "shared", "bank_conflicts"):
        worst = max(lines(launches, "shared"), key=lambda line: line["bank_conflicts"])
        raise CheckFailure(
            f"on {n} float32 elements, your shared-memory accesses had {mine_conflicts} bank conflicts, "
            f"{worst['bank_conflicts']} at {where(worst)}; the reference has none. Let lane tid read words tid and "
            f"tid + s (sequential addressing): 32 consecutive words lie in 32 different banks")


# Stage 3 ------------------------------------------------------------------------------------------------------------

@check(points=2)
def reduce_sum(student, rng, hidden):
    """reduce_sum(x) returns the sum of all of x, for float32, int32 and int64, 2**14 + 7 float32 values included."""
    cases = [{"x": x} for x in _correctness_cases(rng, hidden, big=True)]
    compare_cases(student, "reduce_sum", cases, _sum, returns="number", hidden=hidden, tolerance=_tolerance,
                  hint=_sum_hint)


@check(points=2)
def reduce_sum_profile(student, rng, hidden):
    """reduce_sum spreads the work over many blocks, reads x coalesced, adds in a tree (at most an atomic per warp),
    and has no race or barrier error."""
    # Several elements per thread of the first pass: where a thread's elements lie decides coalescing.
    n = int(rng.integers(PROFILE_SIZE, 2 * PROFILE_SIZE)) if hidden else PROFILE_SIZE
    launches = _student_launches(student, "reduce_sum", rng, n, _sum)
    if max(math.prod(launch["grid"]) for launch in launches) < 2:
        raise CheckFailure(
            f"on {n} float32 elements, every launch of reduce_sum ran a single block. A block runs on one "
            f"multiprocessor (an H100 has 132): spread the first pass over many blocks, each adding its share "
            f"into one partial sum, and add the partial sums in a second pass (or with atomics)")
    _coalesced(launches, _reference_launches("reduce_sum", n), n, "reduce_sum")
    atomics = sum(line["operations"] for line in lines(launches, "global", "atomic"))
    warps = sum(-(-math.prod(launch["block"]) // 32) * math.prod(launch["grid"]) for launch in launches)
    if atomics > warps:
        raise CheckFailure(
            f"on {n} float32 elements, reduce_sum made {atomics} atomic additions to global memory, more than one "
            f"per warp ({warps} warps): atomics on one address take turns, so add in registers and a tree (or "
            f"shuffles) first, and let each block add its one sum with a single atomic, or write it for a "
            f"second pass")
