"""Checks: exact sums, a grid-stride loop over a fixed grid, coalesced access.

The correctness check compares with numpy on float32 and int32, the result in
x's dtype; hidden cases cover no element, one, sizes either side of a warp, and
sizes many times the grid. Where the elements that are wrong form a pattern of
the grid (the first F of every P, or all from some index on), the message says
what it shows. The pattern checks run the student's function in the simulator and
compare its launch reports with the reference's on the same input.
"""

from functools import cache

import numpy as np

from aisys.cuda_kernels import vector_add as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, unredacted
from aisys_grader.launches import (efficiency, errors_message, least_efficient, profiled, reference_launches, total,
                                   where)


PATTERN_SIZE = 5000  # about ten times the grid the notebook asks for: each thread takes about ten steps
WORK_ALLOWED = 1.5  # bytes touched, as a multiple of the reference's (one read of x and y, one write of out)


def _vectors(rng, n, dtype) -> dict:
    if np.dtype(dtype) == np.int32:
        return {"x": rng.integers(-2**30, 2**30, size=n, dtype=np.int32),  # the sums fit in int32
                "y": rng.integers(-2**30, 2**30, size=n, dtype=np.int32)}
    return {"x": rng.standard_normal(n).astype(np.float32), "y": rng.standard_normal(n).astype(np.float32)}


def _truth(x, y):
    return x + y


@check(points=2)
def vector_add(student, rng, hidden):
    """vector_add(x, y) returns x + y exactly, for float32 and int32 of any length, 0 included."""
    sizes = [(1000, np.float32), (33, np.int32), (1, np.float32)]
    if hidden:
        sizes = [(n, dtype) for n in (0, 1, 31, 33, 1000, PATTERN_SIZE) for dtype in (np.float32, np.int32)]
        sizes += [(int(rng.integers(2, 3000)), dtype) for dtype in (np.float32, np.int32)]
    cases = [_vectors(rng, n, dtype) for n, dtype in sizes]
    compare_cases(student, "vector_add", cases, _truth, returns="array", hidden=hidden, dtype="reference",
                  hint=_hint)


def _hint(case, got, expected) -> str:
    """What the wrong elements show: the wrong dtype, or a pattern of the grid in which elements were skipped."""
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        return ""
    if got.dtype != expected.dtype:
        return "x + y keeps the dtype of x and y: allocate out with np.empty_like(x)"
    right = got == expected
    first = int(np.argmax(~right))  # the first wrong element
    if first == 0:
        return ""
    later = np.flatnonzero(right[first:])
    if later.size == 0:
        return (f"Every element from index {unredacted(str(first), 'k')} on is wrong, the ones before right: "
                f"the threads stopped before the end. A grid-stride loop, `for i in range(cuda.grid(1), n, "
                f"cuda.gridsize(1))`, takes each thread on to the end")
    period = first + int(later[0])  # the next right element starts the pattern again
    if (right == right[np.arange(right.size) % period]).all():
        shown = unredacted(f" (the first {first} of every {period}: i % {period} < {first})")
        return (f"Only the elements at the start of each stride of the grid are right{shown}, as if only the "
                f"first block did its share of each stride: thread t of block b starts at cuda.grid(1) = "
                f"b * blockDim.x + t, not at threadIdx.x")
    return ""


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference's launch reports on float32 vectors of length n (they do not depend on the values)."""
    x = np.zeros(n, np.float32)
    return reference_launches(reference.vector_add, x, x)


def _student_launches(student, rng, n) -> list[dict]:
    """The student's launch reports on float32 vectors of length n; CheckFailure on a wrong sum or a report error."""
    case = _vectors(rng, n, np.float32)
    value, launches = profiled(student, "vector_add", returns="array", **case)
    if value.shape != (n,) or not np.array_equal(value, _truth(**case)):
        raise CheckFailure(f"on float32 vectors of length {n}, vector_add did not return x + y (the check "
                           "`vector_add` says more)")
    error = errors_message(launches)
    if error:
        raise CheckFailure(f"on float32 vectors of length {n}, {error}")
    return launches


def _pattern_size(rng, hidden) -> int:
    return int(rng.integers(3000, 6000)) if hidden else PATTERN_SIZE


@check(points=2)
def vector_add_grid_stride(student, rng, hidden):
    """A grid smaller than the data covers it with a grid-stride loop, each element read and written once."""
    n = _pattern_size(rng, hidden)
    launches = _student_launches(student, rng, n)
    threads = sum(launch["threads"] for launch in launches)
    if threads >= n:
        grids = ", ".join(f"{launch['grid'][0]} x {launch['block'][0]}" for launch in launches)
        raise CheckFailure(
            f"on vectors of length {n}, your launches ran {threads} threads (blocks x threads per block: {grids}), "
            f"one or more per element. Launch a fixed, small grid (MAX_BLOCKS blocks of THREADS threads at most) "
            f"and let each thread step through the array by the size of the grid, "
            f"`for i in range(cuda.grid(1), n, cuda.gridsize(1))`: the grid is sized for the GPU, not for n")
    mine, theirs = total(launches, "global", "ideal_sectors"), total(_reference_launches(n), "global", "ideal_sectors")
    if mine > WORK_ALLOWED * theirs:
        raise CheckFailure(
            f"on vectors of length {n}, your kernels read and wrote {mine} sectors' worth of bytes (32 bytes each), "
            f"{mine / theirs:.1f} times what reading x and y and writing out once takes ({theirs}): threads "
            f"handle the same elements. The stride of a grid-stride loop is the number of threads in the whole "
            f"grid, cuda.gridsize(1) = gridDim.x * blockDim.x, not blockDim.x: then thread t takes elements t, "
            f"t + stride, t + 2 * stride, ... and no two threads meet")


@check(points=2)
def vector_add_coalesced(student, rng, hidden):
    """Loads and stores are coalesced: global-memory efficiency as high as the reference's."""
    n = _pattern_size(rng, hidden)
    launches = _student_launches(student, rng, n)
    mine, theirs = efficiency(launches), efficiency(_reference_launches(n))
    if mine >= 0.9 * theirs:
        return
    worst = least_efficient(launches)
    raise CheckFailure(
        f"on float32 vectors of length {n}, {mine:.0%} of the bytes your kernel moved between global memory and the "
        f"chip were bytes it used (the reference: {theirs:.0%}). The worst access is {where(worst)} "
        f"({worst['kind']}): {worst['sectors']} sectors of 32 bytes where "
        f"{worst['ideal_sectors']} would hold the data, {worst['sectors'] / max(worst['requests'], 1):.1f} per warp "
        f"instruction instead of 4. The 32 lanes of a warp should touch 32 consecutive elements in each step: "
        f"element i for thread i, then i + stride, where stride is the number of threads in the grid. A "
        f"contiguous chunk per thread puts the lanes of a warp a chunk apart, each in its own sector")
