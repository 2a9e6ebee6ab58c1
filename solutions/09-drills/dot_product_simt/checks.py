"""Checks: a dot product by a grid-stride loop, a tree per block and one atomic per block, read from the report.

The value is compared with the exact dot product (float64) within 1e-5 of sum(|x * y|). Hidden cases add
the edges: empty vectors, one element, either side of a block and of the grid (MAX_BLOCKS blocks), several
elements per thread, large products that cancel, and a property check on random lengths (shrunk to the
smallest failing one). The report checks run the student's dot in the simulator and compare with the
reference (aisys.cuda_kernels.dot: the same grid, block and grid-stride loop) on the same length.
"""

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.cuda_kernels import dot as reference

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure
from aisys_grader.launches import efficiency, errors_message, least_efficient, lines, profiled, reference_launches, \
    where

THREADS = reference.BLOCK  # the notebook fixes the same block and grid
GRID = reference.MAX_BLOCKS * THREADS  # threads in the largest grid
PATTERN_SIZE = 4 * GRID  # four elements per thread: where a thread's elements lie decides coalescing
RTOL_OF_ABS = 1e-5  # the tolerance, as a fraction of sum(|x * y|)

# Small integers and halves: their products and sums are exact in float32, so any difference is a mistake.
HALVES = st.integers(-6, 6).map(lambda v: v / 2)
PAIRS = st.integers(1, GRID + 40).flatmap(lambda n: st.fixed_dictionaries(
    {"x": hnp.arrays(np.float32, n, elements=HALVES), "y": hnp.arrays(np.float32, n, elements=HALVES)}))


def _dot(x, y):
    return np.float32(np.dot(x.astype(np.float64), y.astype(np.float64)))


def _tolerance(case) -> tuple:
    products = np.abs(case["x"].astype(np.float64) * case["y"])
    return 0.0, RTOL_OF_ABS * float(products.sum()) + 1e-30


def _pair(rng, n) -> dict:
    return {"x": rng.uniform(-1, 1, n).astype(np.float32), "y": rng.uniform(-1, 1, n).astype(np.float32)}


@check(points=2)
def dot(student, rng, hidden):
    """dot(x, y) returns x . y as a float32 number, for any length."""
    sizes = [5, 300, 2000]
    if hidden:
        sizes = [0, 1, THREADS - 1, THREADS + 1, GRID + 1, 3 * GRID - 5, int(rng.integers(2, 3 * GRID))]
    cases = [_pair(rng, n) for n in sizes]
    if hidden:  # large products of both signs: an element lost or counted twice shows at once
        x = rng.uniform(1e2, 1e3, 700).astype(np.float32)
        cases.append({"x": x, "y": (rng.choice([-1.0, 1.0], 700) * rng.uniform(1e2, 1e3, 700)).astype(np.float32)})
    compare_cases(student, "dot", cases, _dot, returns="number", hidden=hidden, tolerance=_tolerance)
    if hidden:
        compare_property(student, "dot", PAIRS, _dot, rng=rng, returns="number", hidden=hidden,
                         tolerance=_tolerance, examples=12)


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference's reports on n float32 elements (they do not depend on the values)."""
    return reference_launches(reference.dot, np.ones(n, np.float32), np.ones(n, np.float32))


def _launches(student, rng, n: int) -> list[dict]:
    """The student's reports on two float32 vectors of n elements; CheckFailure unless the value is right."""
    case = _pair(rng, n)
    value, launches = profiled(student, "dot", returns="number", **case)
    if abs(float(value) - float(_dot(**case))) > _tolerance(case)[1]:
        raise CheckFailure(f"on {n} float32 elements, dot returned a wrong result (the check `dot` says more); its "
                           f"launch reports are graded only when it is right")
    return launches


@check(points=2)
def dot_coalesced(student, rng, hidden):
    """A grid of at most MAX_BLOCKS blocks whose loads are coalesced: a grid-stride loop, as the reference's."""
    n = int(rng.integers(3 * GRID + 1, PATTERN_SIZE)) if hidden else PATTERN_SIZE
    launches = _launches(student, rng, n)
    blocks = max(math.prod(launch["grid"]) for launch in launches)
    if blocks > reference.MAX_BLOCKS:
        raise CheckFailure(
            f"on {n} float32 elements, a launch of dot had {blocks} blocks; the grid has at most "
            f"MAX_BLOCKS = {reference.MAX_BLOCKS}, whatever n: size the grid for the machine, and let each thread "
            f"step through the vectors by the size of the grid, cuda.gridsize(1)")
    mine, theirs = efficiency(launches), efficiency(_reference_launches(n))
    if mine < 0.9 * theirs:
        worst = least_efficient(launches)
        raise CheckFailure(
            f"on {n} float32 elements, {mine:.0%} of the bytes your kernels moved between global memory and the "
            f"chip were bytes they used (the reference: {theirs:.0%}). The worst access is {where(worst)} "
            f"({worst['kind']}): {worst['sectors']} sectors of 32 bytes where {worst['ideal_sectors']} would hold "
            f"the data, {worst['sectors'] / max(worst['requests'], 1):.1f} sectors per warp instruction. A "
            f"contiguous chunk per thread puts the 32 lanes of a warp a chunk apart, each in its own sector; "
            f"with a grid-stride loop (i = cuda.grid(1), then i + cuda.gridsize(1), ...) they read 32 "
            f"consecutive elements in every step")


@check(points=2)
def dot_block_sums(student, rng, hidden):
    """Each block adds its threads' sums without a race or a barrier error, then adds its sum with one atomic."""
    n = int(rng.integers(GRID + 1, 2 * GRID)) if hidden else 1000
    launches = _launches(student, rng, n)
    if error := errors_message(launches):
        raise CheckFailure(
            f"on {n} float32 elements, {error}. In the simulator, threads run one after the other, so a shared "
            f"total that every thread adds to with a plain += can come out right; on a GPU the read-modify-writes "
            f"of 256 threads interleave and most additions are lost. Give each thread its own word, sdata[t] = acc, "
            f"and add them in a tree, with cuda.syncthreads() after the stores and between the levels")
    blocks = sum(math.prod(launch["grid"]) for launch in launches)
    atomics = sum(line["operations"] for line in lines(launches, "global", "atomic"))
    if atomics > blocks:
        raise CheckFailure(
            f"on {n} float32 elements, your kernels made {atomics} atomic additions to global memory in {blocks} "
            f"blocks, more than one per block. Atomics on one address are served one after another: add the "
            f"products in registers and a tree first, then let thread 0 add the block's sum with a single "
            f"cuda.atomic.add(out, 0, sdata[0])")
