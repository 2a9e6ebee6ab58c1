"""Checks: a sum, a row-wise softmax and a tiled transpose written in CUDA C.

GPU only: every check first calls `require_gpu(cupy=True)`, so without a GPU (or without
CuPy) it reports "skipped: needs a GPU (...)", neither passed nor failed, and the grading
engine records no grade for the notebook. Student functions take and return numpy
arrays (float32 ones: their dtype is checked too); the truth is numpy in float64. Hidden
cases cover one element, either side of a warp and of a block, ragged tiles, empty inputs,
and sizes large enough that many blocks run at once, which is where a missing barrier
shows on a real GPU. The sum's first case, on every seed, is 2**17 copies of 0.1: one
float32 total adding them one by one (an atomicAdd per element) drifts 100 times past the
tolerance, and a wrong sum of equal values tells how many of them it holds.
"""

import numpy as np

# The references: the checks only read their launch constants, but importing them keeps them out of the sandbox.
import aisys.cuda_c.reduction as sum_reference
import aisys.cuda_c.softmax as softmax_reference
import aisys.cuda_c.transpose as transpose_reference

from aisys_grader.checks import check, compare_cases, require_gpu
from aisys_grader.compare import unredacted


BLOCK = sum_reference.BLOCK  # threads per block of the sum; the notebook fixes the same numbers
FULL_PASS = BLOCK * sum_reference.MAX_BLOCKS  # pass 1 has one element per thread up to here; then a grid-stride loop
SUM_ERROR = 1e-5  # a float32 sum may differ from the exact one by this fraction of sum(|x|)
EQUAL = (2**17, 0.1)  # the sum's first case: this many copies of a value float32 cannot hold exactly
ROW_BLOCK = softmax_reference.BLOCK  # threads per row of the softmax
TILE = transpose_reference.TILE


# Sum ----------------------------------------------------------------------------------------------------------------

def _vector(rng, n, kind):
    if kind == "equal":
        return np.full(n, EQUAL[1], np.float32)
    if kind == "normal":
        return rng.standard_normal(n).astype(np.float32)
    return rng.random(n, dtype=np.float32)  # positive: float32 precision is then relative to the sum itself


@check(points=3)
def cuda_sum(student, rng, hidden):
    """cuda_sum(x) returns the sum of a float32 vector of any length, empty and 2**22 + 7 elements included."""
    require_gpu(cupy=True)
    cases = [(EQUAL[0], "equal"), (1000, "uniform"), (1, "normal"), (257, "normal")]
    if hidden:
        cases = [(EQUAL[0], "equal")] + [(n, "normal") for n in (0, 1, 31, 32, 33, BLOCK - 1, BLOCK, BLOCK + 1)]
        cases += [(int(rng.integers(2, 5000)), "normal"), (int(rng.integers(5000, 300_000)), "uniform"),
                  (FULL_PASS, "uniform"), (FULL_PASS + 1, "uniform"), (2**22 + 7, "uniform")]
    compare_cases(student, "cuda_sum", [{"x": _vector(rng, n, kind)} for n, kind in cases],
                  lambda x: float(x.sum(dtype=np.float64)), returns="number", hidden=hidden,
                  tolerance=lambda case: (0, _sum_allowed(case["x"])), hint=_sum_hint)


def _sum_allowed(x) -> float:
    return SUM_ERROR * float(np.abs(x).sum(dtype=np.float64)) + 1e-6


def _sum_hint(case, got, expected) -> str:
    x = case["x"]
    if isinstance(got, (int, float)) and x.size > 1 and (x == x[0]).all():
        count = float(got) / float(x[0])  # how many of the values the sum holds
        held = unredacted(f" (about {count:.0f} of {x.size})")
        if count > 1.01 * x.size:  # a drift of rounding stays well within 1 %
            return (f"On equal values your sum holds more of them than there are{held}: elements were added "
                    f"more than once (a grid-stride loop steps by gridDim.x * BLOCK)")
        if count < 0.99 * x.size:
            return (f"On equal values your sum holds fewer of them than there are{held}: some were never added "
                    f"(a tree level or a shuffle step missing, or partial sums left out)")
        return ("On equal values your sum drifted: every addition to one large float32 total rounds, the same "
                "way each time (an atomicAdd per element). Add in registers and a tree, then one number per block")
    return (f"Float32 addition in another order may differ from the exact sum by {SUM_ERROR:g} of sum(|x|)"
            + unredacted(f", {_sum_allowed(case['x']):.3g} here"))


# Softmax ------------------------------------------------------------------------------------------------------------

def _softmax(x):
    """Row-wise softmax in float64, rounded to float32: the truth."""
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True)) if x.size else x
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32) if x.size else x.astype(np.float32)


@check(points=2)
def cuda_softmax(student, rng, hidden):
    """cuda_softmax(x) returns softmax over each row, for rows short and long, ragged, and empty inputs."""
    require_gpu(cupy=True)
    shapes = [(4, 10), (3, 1000), (2, ROW_BLOCK + 1)]
    if hidden:
        shapes = [(1, 1), (5, 1), (1, 31), (3, 32), (2, 33), (4, ROW_BLOCK - 1), (3, ROW_BLOCK), (2, ROW_BLOCK + 1),
                  (7, 5000), (300, 67), (0, 10), (3, 0)]
        shapes += [(int(rng.integers(1, 50)), int(rng.integers(2, 3000))) for _ in range(2)]
    cases = [{"x": (3 * rng.standard_normal(shape)).astype(np.float32)} for shape in shapes]
    compare_cases(student, "cuda_softmax", cases, _softmax, returns="array", hidden=hidden, dtype="reference")


def _extreme_rows(rng, rows, cols):
    """Rows with values up to +-1e4, and -inf entries (never a whole row of them: its softmax is NaN)."""
    x = rng.uniform(-1e4, 1e4, size=(rows, cols)).astype(np.float32)
    if cols > 1:
        x[rng.random((rows, cols)) < 0.25] = -np.inf
        x[np.arange(rows), rng.integers(0, cols, size=rows)] = rng.uniform(-1e4, 1e4, size=rows)  # one finite each
    return x


@check(points=2)
def cuda_softmax_stable(student, rng, hidden):
    """cuda_softmax is numerically stable: values of +-1e4 and -inf entries give the right answer, never inf or NaN."""
    require_gpu(cupy=True)
    big = np.full((1, 300), 1e4, np.float32)  # every exp(1e4) overflows float32; the answer is 1/300 each
    one_hot = np.full((1, 40), -np.inf, np.float32)
    one_hot[0, 37] = 5e3
    arrays = [big, one_hot, _extreme_rows(rng, 3, 100)]
    if hidden:
        shapes = [(1, 1), (2, 33), (4, ROW_BLOCK + 1), (3, 3000), (64, int(rng.integers(2, 600)))]
        arrays = [big, one_hot, -big] + [_extreme_rows(rng, rows, cols) for rows, cols in shapes]
    compare_cases(student, "cuda_softmax", [{"x": x} for x in arrays], _softmax, returns="array", hidden=hidden,
                  dtype="reference")


# Transpose ----------------------------------------------------------------------------------------------------------

@check(points=3)
def cuda_transpose(student, rng, hidden):
    """cuda_transpose(a) returns a.T exactly, for any shape: ragged tiles, single rows and columns, empty, large."""
    require_gpu(cupy=True)
    shapes = [(4, 6), (33, 65), (1, 37), (300, 500)]
    if hidden:
        shapes = [(1, 1), (1, 37), (37, 1), (TILE - 1, TILE), (TILE, TILE + 1), (100, 31), (257, 129), (0, 5), (5, 0)]
        shapes += [tuple(int(s) for s in rng.integers(1, 300, size=2)) for _ in range(2)]
        shapes += [tuple(int(s) for s in rng.integers(1500, 2500, size=2))]  # thousands of blocks at once
    cases = [{"a": rng.standard_normal(shape).astype(np.float32)} for shape in shapes]
    compare_cases(student, "cuda_transpose", cases, lambda a: np.ascontiguousarray(a.T), returns="array",
                  hidden=hidden, tolerance=(0, 0), dtype="reference")  # a transpose moves bits


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
import torch  # noqa: E402

from aisys_grader import speed  # noqa: E402

# Each kernel is launched as the notebook's section 5 does (sum_on_gpu, softmax_on_gpu, transpose_on_gpu: its
# launches, with the result left on the GPU) and timed against a copy of as many bytes in the same run.
SUM_N = 2**28
SUM_SPEED = speed.Workload(
    "sum_on_gpu", (speed.Input((SUM_N,), "fp32", mean=1.0),), arrays="cupy",
    reference=lambda x: x.double().sum().reshape(1), rtol=1e-5,
    limit=speed.copy_limit(4 * SUM_N), work=4 * SUM_N, unit="bytes", label="2**28 fp32 elements", reps=1200,
    floor=0.4, hint="A grid-stride loop in which a warp reads 32 consecutive floats a step keeps every load coalesced.")
SOFTMAX_ROWS, SOFTMAX_COLS = 16384, 4096
SOFTMAX_SPEED = speed.Workload(
    "softmax_on_gpu", (speed.Input((SOFTMAX_ROWS, SOFTMAX_COLS), "fp32", std=3.0),), arrays="cupy",
    reference=lambda x: torch.softmax(x, dim=1), rtol=1e-5,
    limit=speed.copy_limit(8 * SOFTMAX_ROWS * SOFTMAX_COLS), work=8 * SOFTMAX_ROWS * SOFTMAX_COLS, unit="bytes",
    label=f"a {SOFTMAX_ROWS} x {SOFTMAX_COLS} fp32 matrix", reps=2000, floor=0.4,
    hint="All 256 threads of a row's block share its three sweeps, a warp reading 32 consecutive floats a step; the "
         "row (16 KiB) is read from memory once and found in the cache after that.")
TRANSPOSE_ROWS, TRANSPOSE_COLS = 8192, 16384
TRANSPOSE_SPEED = speed.Workload(
    "transpose_on_gpu", (speed.Input((TRANSPOSE_ROWS, TRANSPOSE_COLS), "fp32"),), arrays="cupy",
    reference=lambda a: a.t().contiguous(), rtol=0.0,
    limit=speed.copy_limit(8 * TRANSPOSE_ROWS * TRANSPOSE_COLS), work=8 * TRANSPOSE_ROWS * TRANSPOSE_COLS,
    unit="bytes", label=f"an {TRANSPOSE_ROWS} x {TRANSPOSE_COLS} fp32 matrix", reps=1000, floor=0.4,
    hint="Stage a tile in shared memory (padded to TILE + 1 columns) so that both the reads of a and the writes of "
         "the transpose are 32 consecutive floats per warp.")


@check(points=1)
def cuda_sum_speed(student, rng, hidden):
    """On a GPU: block_sum, launched as cuda_sum launches it, sums 2**28 fp32 elements at 40% or more of the copy
    bandwidth (timed by the grader: aisys_grader/speed.py)."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, SUM_SPEED, at_least=0.4)


@check(points=1)
def cuda_sum_near_copy_speed(student, rng, hidden):
    """On a GPU: block_sum sums 2**28 fp32 elements at 70% or more of the copy bandwidth."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, SUM_SPEED, at_least=0.7)


@check(points=1)
def cuda_softmax_speed(student, rng, hidden):
    """On a GPU: softmax_rows, one block per row, on a 16384 x 4096 fp32 matrix moves its bytes at 40% or more of
    the copy bandwidth (timed by the grader: aisys_grader/speed.py)."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, SOFTMAX_SPEED, at_least=0.4)


@check(points=1)
def cuda_softmax_near_copy_speed(student, rng, hidden):
    """On a GPU: softmax_rows on a 16384 x 4096 fp32 matrix moves its bytes at 60% or more of the copy bandwidth."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, SOFTMAX_SPEED, at_least=0.6)


@check(points=1)
def cuda_transpose_speed(student, rng, hidden):
    """On a GPU: transpose_tiled on an 8192 x 16384 fp32 matrix moves its bytes at 40% or more of the copy bandwidth
    (timed by the grader: aisys_grader/speed.py)."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, TRANSPOSE_SPEED, at_least=0.4)


@check(points=1)
def cuda_transpose_near_copy_speed(student, rng, hidden):
    """On a GPU: transpose_tiled on an 8192 x 16384 fp32 matrix moves its bytes at 55% or more of the copy
    bandwidth."""
    require_gpu(cupy=True, optional=True)
    speed.require(student, TRANSPOSE_SPEED, at_least=0.55)
