"""Checks: a work-efficient block scan, a scan across blocks, no races, O(n) work.

Every scan is inclusive and keeps the input's dtype: the truth is
np.cumsum(x, dtype=x.dtype). Integers compare exactly; int64 inputs exceed
the int32 range, so a scan that adds them in 32 bits fails, and one int32 case,
the same on every seed, has prefix sums past 2**24, which float32 rounds. float32 compares
with the exact (float64) prefix sums within 2 log2(n) roundings of the sum of
|x|: the error a tree of additions may make, doubled for the step across
blocks. Hidden cases cover 1 element, a warp and one more or less, a block
and one more, ragged multi-block sizes, and one long array of 2**14 + 3.

The pattern checks run the student's functions in the simulator: no race or
barrier error on ragged inputs, and, for `block_scan` on whole blocks, about
as few memory requests (warp-level loads and stores) as the reference.
"""

import math
from functools import cache

import numpy as np

from aisys.cuda_kernels import scan as reference

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close
from aisys_grader.launches import errors_message, lines, profiled, reference_launches, total, where


SECTION = reference.SECTION  # elements per block, fixed in the notebook
LONG = 2**14 + 3  # 65 blocks: the one long case
WORK_SIZE = 4 * SECTION  # whole blocks, so that the work compared is the scan's, not the edge's
WORK_LIMIT = 1.6  # more memory requests than this times the reference's is not work-efficient
ROUNDING = 1e-4  # integer sums off by less than this fraction of the sum of |x| were rounded, not mis-added


def _array(rng, n: int, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return rng.uniform(-1, 1, n).astype(np.float32)
    if dtype == np.int32:
        return rng.integers(-1000, 1000, n, dtype=np.int32)
    return rng.integers(-2**35, 2**35, n, dtype=np.int64)  # sums stay exact in float64, far outside int32


def _wide_int32() -> np.ndarray:
    """The same on every seed: prefix sums up to about 2**30, beyond float32's 24 bits, within int32."""
    return np.random.default_rng(17).integers(2**20, 2**21, 600, dtype=np.int32)


def _cumsum(x: np.ndarray) -> np.ndarray:
    """The exact inclusive scan: in float64 for float32 (then compared with a tolerance), else in x's dtype."""
    return np.cumsum(x, dtype=np.float64 if x.dtype == np.float32 else x.dtype)


def _block_cumsum(x: np.ndarray) -> np.ndarray:
    """Each SECTION-element chunk scanned on its own."""
    return np.concatenate([_cumsum(x[i:i + SECTION]) for i in range(0, x.size, SECTION)] or [_cumsum(x)])


def _atol(x: np.ndarray, length: int) -> float:
    """Rounding allowed for scans of runs up to `length` elements of x: 2 log2(length) float32 ulps of sum |x|."""
    if x.dtype != np.float32 or x.size == 0:
        return 0.0
    levels = max(math.ceil(math.log2(length + 1)), 1)
    return 2 * levels * float(np.finfo(np.float32).eps) * float(np.abs(x.astype(np.float64)).sum())


def _scans(student, function: str, arrays: list, truth, length, hidden: bool) -> None:
    """`function`(x) equals `truth`(x) in x's dtype, within the rounding of scans of `length`(x.size) elements.
    (The truth of a float32 scan is float64, so the dtype is x's, not the truth's.)"""
    __tracebackhide__ = True

    def compare(got, expected, case):
        x = case["x"]
        if got.dtype != x.dtype:
            raise CheckFailure(f"the result has dtype {got.dtype}; a scan keeps the dtype of x, {x.dtype} "
                               f"(np.cumsum(x, dtype=x.dtype))")
        assert_close(got, expected, rtol=0.0, atol=_atol(x, length(x.size)))

    compare_cases(student, function, [{"x": x} for x in arrays + [_wide_int32()]], truth, returns="array",
                  hidden=hidden, compare=compare, hint=_hint)


def _hint(case, got, expected) -> str:
    scale = np.cumsum(np.abs(case["x"].astype(np.float64)))  # what rounding the running sums is relative to
    close = got.dtype.kind == "i" and got.shape == expected.shape and (
        np.abs(got.astype(np.float64) - expected) <= ROUNDING * scale).all()
    return ("Close, but integer prefix sums must be exact: these were rounded, as float32 (24 bits of mantissa) "
            "rounds integers past 2**24. Keep x's dtype in the shared array and every sum" if close else "")


def _cases(rng, sizes_and_dtypes) -> list:
    return [_array(rng, n, dtype) for n, dtype in sizes_and_dtypes]


@check(points=2)
def block_scan(student, rng, hidden):
    """block_scan(x) is the inclusive scan of each 256-element chunk of x, for float32, int32 and int64."""
    cases = [(10, np.int32), (300, np.float32), (600, np.int64)]
    if hidden:
        cases = [(1, np.float32), (31, np.int64), (32, np.int32), (33, np.float32), (255, np.int32),
                 (256, np.int64), (257, np.float32), (1000, np.int32)]
        cases += [(int(rng.integers(2, 1500)), dtype) for dtype in (np.float32, np.int64)]
    _scans(student, "block_scan", _cases(rng, cases), _block_cumsum, lambda n: min(n, SECTION), hidden)


@check(points=3)
def scan(student, rng, hidden):
    """scan(x) is the inclusive prefix sum of x, np.cumsum(x, dtype=x.dtype), across any number of blocks."""
    cases = [(10, np.int32), (1000, np.float32), (600, np.int64)]
    if hidden:
        cases = [(0, np.int32), (1, np.int64), (31, np.float32), (32, np.int32), (33, np.int64),
                 (257, np.float32), (1000, np.int32), (5000, np.int64), (5000, np.float32), (LONG, np.float32)]
        cases += [(int(rng.integers(2, 3000)), dtype) for dtype in (np.int32, np.int64)]
    _scans(student, "scan", _cases(rng, cases), _cumsum, lambda n: n, hidden)


def _launches(student, function: str, x: np.ndarray) -> list[dict]:
    return profiled(student, function, x=x, returns="array")[1]


@check(points=2)
def scan_race_free(student, rng, hidden):
    """No shared-memory race and no barrier error in any launch of scan, partial last blocks included."""
    sizes = [1000, 33]
    if hidden:
        sizes = [1, int(rng.integers(2, SECTION)), int(rng.integers(SECTION + 1, 4 * SECTION))]
    for n in sizes:
        error = errors_message(_launches(student, "scan", _array(rng, n, np.int32)))
        if error:
            raise CheckFailure(
                f"scan of {n} int32 elements: {error}. Each level of a scan reads what other threads wrote at the "
                f"level before, so a cuda.syncthreads() must separate every two levels (and, in place, a thread "
                f"must not overwrite what another still has to read at the same level); every thread must reach "
                f"every barrier, so bounds checks go around loads and stores, never around a barrier or as an "
                f"early return")


@cache
def _reference_launches(n: int) -> list[dict]:
    """The reference block_scan's launch reports on n int32 elements (they do not depend on the values)."""
    return reference_launches(reference.block_scan, np.zeros(n, np.int32))


@check(points=2)
def scan_work_efficient(student, rng, hidden):
    """block_scan is work-efficient: about as few shared and global memory requests as the reference's O(n)."""
    n = WORK_SIZE
    launches = _launches(student, "block_scan", _array(rng, n, np.int32))
    shared, global_ = total(launches, "shared", "requests"), total(launches, "global", "requests")
    ref = _reference_launches(n)
    ref_shared, ref_global = total(ref, "shared", "requests"), total(ref, "global", "requests")
    mine, theirs = shared + global_, ref_shared + ref_global
    if mine <= WORK_LIMIT * theirs:
        return
    worst = max(lines(launches, "shared") + lines(launches, "global"), key=lambda line: line["requests"])
    raise CheckFailure(
        f"block_scan of {n} int32 elements ({n // SECTION} blocks) made {mine} warp-level memory requests "
        f"({shared} shared, {global_} global), {mine / theirs:.1f} times the reference's {theirs} ({ref_shared} "
        f"shared, {ref_global} global). The busiest access is {where(worst)} "
        f"({worst['space']} {worst['kind']}, {worst['requests']} requests). A scan in which every element works "
        f"at every level (Hillis-Steele: s[i] += s[i - stride] for all i, stride = 1, 2, 4, ...) does "
        f"n log2 n additions, 8 per element on a 256-element block, where a loop does one; the up-sweep and "
        f"down-sweep of Brent-Kung / Blelloch do fewer than 2, and pack the busy threads at the low indices so "
        f"that whole warps sit out the levels where few threads work")
