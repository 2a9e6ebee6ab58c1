"""Checks: vector sum and max over many programs, row sums and maxima, empties.

Expected values come from torch on the CPU in float64, rounded to the data's
dtype; results are compared within one unit in the last place of that dtype
(compare.TOLERANCES). Hidden cases cover one element, either side of a block
(127, 128, 129), ragged lengths, several passes (a vector of 2**14 + 5), rows
shorter and longer than a block, every dtype, and, for maxima, all-negative
data, scattered -inf and all -inf: the padding of a masked load must be the
identity of the operation. Inputs stay small: on a CPU each program runs in
Triton's interpreter (about half a millisecond).

Results must be in the data's format: the numbers rounded to it, the arrays of
its dtype (bf16 as float32 holding bf16 values). Every case list holds float16
data whose sums are small but whose running sums pass 65504, float16's largest
number: a partial result or a per-lane accumulator kept in float16 turns inf.
`vector_sum_passes` runs vector_sum in the grader's Triton interpreter (the
clean room) and counts its launches: the first pass spread over many programs,
each element read once, and no atomics, whose order changes a float sum.
"""

import numpy as np
import torch

from aisys.triton_kernels import reduction as reference  # noqa: F401  the answer key: kept out of the grading kernel
from aisys.tensors import TORCH_DTYPES

from aisys_grader.checks import check, compare_cases, raises_value_error
from aisys_grader.compare import FORMATS, CheckFailure, assert_close, shown, tolerance
from aisys_grader.low_precision import as_sent, rounded


DTYPES = tuple(TORCH_DTYPES)
EDGE_SIZES = (1, 7, 127, 128, 129, 1000)  # one element, either side of the notebook's BLOCK = 128, two passes
BIG = 2**14 + 5  # three passes of BLOCK = 128: 129 programs, then 2, then 1
EDGE_SHAPES = ((1, 1), (3, 1000), (4, 127), (4, 128), (2, 129), (5, 7))
# float16 data whose sums are small but whose running sums pass 65504 (inf in float16), whatever block a program
# loads (up to a quarter of the row): blocks of 128 elements summing to 76800, then as many summing to -76800; rows
# whose first half is +40000 and second half -40000, so that each lane's accumulator adds +40000 at least twice.
OVERFLOW_VECTOR = np.concatenate([np.full(1024, 600.0), np.full(1024, -600.0), np.full(5, 0.5)])
OVERFLOW_ROWS = np.stack([np.concatenate([np.full(512, 4e4), np.full(512, -4e4), np.arange(3.0)]),
                          np.concatenate([np.full(512, -4e4), np.full(512, 4e4), np.ones(3)])])


def _values(rng, shape, kind: str) -> np.ndarray:
    """'positive': uniform in [0, 1) (a sum without cancellation, so the tolerance is relative to it);
    'mixed': standard normal; 'negative': all below -1; 'some -inf': mixed with scattered -inf; 'all -inf'."""
    if kind == "positive":
        return rng.random(shape)
    values = rng.standard_normal(shape)
    if kind == "negative":
        return -1 - np.abs(values)
    if kind == "some -inf":
        values[rng.random(shape) < 0.3] = -np.inf
    elif kind == "all -inf":
        values[...] = -np.inf
    return values


def _truth(reduce):
    """The reference of a case (its data, x or a, and its dtype): torch's answer in float64, rounded to the dtype
    (as float32 for fp16 and bf16, which numpy or the bridge lack)."""
    def expected(dtype, **data):
        (values,) = data.values()
        result = reduce(torch.from_numpy(np.asarray(values, np.float64))).to(TORCH_DTYPES[dtype])
        return result.item() if result.ndim == 0 else result.float().numpy()
    return expected


def _dtype_tolerance(case) -> tuple[float, float]:
    return tolerance(case["dtype"])


def _format(case) -> str:
    return case["dtype"]


def _in_format(got, expected, case):
    """compare_cases' comparison for a number: rounded to the case's dtype, as the array results are stored in it,
    then within that dtype's tolerance."""
    dtype = case["dtype"]
    if _unrounded(got, dtype):
        raise CheckFailure(f"the result {shown(got, '!r')} is not a {dtype} number")
    assert_close(got, expected, rtol=tolerance(dtype)[0], atol=tolerance(dtype)[1])


def _unrounded(got, dtype: str) -> bool:
    """Whether the number `got` is one the dtype cannot hold."""
    return isinstance(got, float) and np.isfinite(got) and float(rounded([got], dtype)[0]) != got


def _format_hint(case, got) -> str:
    """For a result not in the data's format: how to put it there."""
    if isinstance(got, np.ndarray) and got.dtype != np.dtype(FORMATS[case["dtype"]]):
        return "Allocate the output in the data's dtype (dtype=t.dtype) and store into it: to_numpy keeps that dtype."
    if _unrounded(got, case["dtype"]):
        return "Round the float32 result to the data's dtype: result.to(TORCH_DTYPES[dtype]).item()."
    return ""


def _sum_hint(case, got, expected) -> str:
    data = case["x"] if "x" in case else case["a"]
    if more := _format_hint(case, got):
        return more
    if not np.isfinite(got).all():
        return ("inf or NaN from finite data: a sum kept in float16 passes 65504, its largest number, although the "
                "total is small. Convert every load to float32 and keep accumulators and partial results in "
                "float32; on a GPU a load past the end (no mask) also gives inf here.")
    if data.ndim == 2:
        return ("Each program must walk all ceil(n_cols / BLOCK) blocks of its row (range(0, n_cols, BLOCK)), the "
                "last one partial and masked, starting at a_ptr + row * a.stride(0), the distance between rows.")
    return ("Every element must reach the result: launch ceil(n / BLOCK) programs, then reduce their partial results "
            "the same way, pass after pass, until one value is left.")


def _max_hint(case, got, expected) -> str:
    if more := _format_hint(case, got):
        return more
    if (np.asarray(got) == 0).any() and (np.asarray(expected) < 0).any():
        return ("0 where the data are negative: masked lanes hold `other`, and for a maximum it must be -inf, the "
                "identity of max (other=float('-inf'), and an accumulator that starts at -inf).")
    return ("Mask every load (mask=offs < n) with other=float('-inf'), and let every element reach the result: "
            "all blocks of a row, all programs' partial results.")


def _vector_cases(rng, hidden, kinds):
    if not hidden:
        sizes = [(1000, "fp32", kinds[0]), (300, "fp16", kinds[-1]), (129, "bf16", kinds[0])]
    else:
        sizes = [(n, dtype, kinds[int(rng.integers(len(kinds)))]) for n in EDGE_SIZES for dtype in DTYPES]
        sizes += [(int(rng.integers(2, 3000)), dtype, kind) for dtype in DTYPES for kind in kinds]
        sizes.append((BIG, "fp32", kinds[-1]))
    cases = [{"x": as_sent(_values(rng, n, kind), dtype), "dtype": dtype} for n, dtype, kind in sizes]
    return cases + [{"x": as_sent(OVERFLOW_VECTOR, "fp16"), "dtype": "fp16"}]


def _matrix_cases(rng, hidden, kinds):
    if not hidden:
        shapes = [((3, 1000), "fp32", kinds[0]), ((5, 129), "fp16", kinds[-1]), ((1, 1), "bf16", kinds[0])]
    else:
        shapes = [(shape, dtype, kinds[int(rng.integers(len(kinds)))]) for shape in EDGE_SHAPES for dtype in DTYPES]
        shapes += [((int(rng.integers(1, 9)), int(rng.integers(2, 2000))), dtype, kind)
                   for dtype in DTYPES for kind in kinds]
    cases = []
    for shape, dtype, kind in shapes:
        a = _values(rng, shape, kind)
        if kind != "positive" and shape[0] > 1:
            a[-1] = -1 - np.abs(rng.standard_normal(shape[1]))  # a row of negative numbers in every matrix for max
        cases.append({"a": as_sent(a, dtype), "dtype": dtype})
    return cases + [{"a": as_sent(OVERFLOW_ROWS, "fp16"), "dtype": "fp16"}]


MAX_KINDS = ("mixed", "some -inf", "all -inf", "negative")  # 'negative' last: the visible fp16 case


@check(points=2)
def vector_sum(student, rng, hidden):
    """vector_sum(x, dtype) returns the sum of x rounded to its dtype, for any length and fp32, fp16 and bf16."""
    compare_cases(student, "vector_sum", _vector_cases(rng, hidden, ("positive",)), _truth(torch.sum),
                  returns="number", hidden=hidden, compare=_in_format, hint=_sum_hint)


@check(points=2)
def vector_max(student, rng, hidden):
    """vector_max(x, dtype) returns the largest element, for negative data and -inf entries too."""
    compare_cases(student, "vector_max", _vector_cases(rng, hidden, MAX_KINDS), _truth(torch.max),
                  returns="number", hidden=hidden, compare=_in_format, hint=_max_hint)


@check(points=2)
def row_sums(student, rng, hidden):
    """row_sums(a, dtype) returns the sum of each row, for rows shorter and longer than a block."""
    cases = _matrix_cases(rng, hidden, ("positive",))
    compare_cases(student, "row_sums", cases, _truth(lambda a: a.sum(dim=1)), returns="array", hidden=hidden,
                  tolerance=_dtype_tolerance, dtype=_format, hint=_sum_hint)


@check(points=2)
def row_max(student, rng, hidden):
    """row_max(a, dtype) returns the largest element of each row, for rows of negative numbers and of -inf too."""
    cases = _matrix_cases(rng, hidden, MAX_KINDS)
    compare_cases(student, "row_max", cases, _truth(lambda a: a.amax(dim=1)), returns="array", hidden=hidden,
                  tolerance=_dtype_tolerance, dtype=_format, hint=_max_hint)


@check(points=1)
def empty_inputs(student, rng, hidden):
    """No elements: the sum is 0 (zeros for rows without columns), the maximum raises ValueError."""
    for dtype in DTYPES if hidden else ("fp32",):
        empty = as_sent(np.zeros(0), dtype)
        if (got := student.call("vector_sum", x=empty, dtype=dtype, returns="number")) != 0:
            raise CheckFailure(f"vector_sum of an empty {dtype} vector returned {shown(got, '!r')}; the sum of no "
                               "elements is 0")
        raises_value_error(student, "vector_max", "the maximum of no elements is undefined", x=empty, dtype=dtype)
        rows = int(rng.integers(1, 5)) if hidden else 3
        no_cols = as_sent(np.zeros((rows, 0)), dtype)
        assert_close(student.call("row_sums", a=no_cols, dtype=dtype, returns="array"), np.zeros(rows, np.float32),
                     where=f"row_sums of a {dtype} matrix of shape {no_cols.shape}")
        raises_value_error(student, "row_max", "the maximum of an empty row is undefined", a=no_cols, dtype=dtype)
        no_rows = as_sent(np.zeros((0, 4)), dtype)
        for function in ("row_sums", "row_max"):
            got = student.call(function, a=no_rows, dtype=dtype, returns="array")
            if got.shape != (0,):
                raise CheckFailure(f"{function} of a {dtype} matrix of shape (0, 4) returned an array of shape "
                                   f"{got.shape}; a matrix without rows has no row results: shape (0,)")


PASSES_N = 2**13 + 3  # 65 blocks of the notebook's 128: the first pass has many programs to spread over
MIN_PROGRAMS = 8  # the reference's first pass in the interpreter runs 16


@check(points=1)
def vector_sum_passes(student, rng, hidden):
    """vector_sum spreads its first pass over many programs and adds no partial sum with an atomic (its launches
    counted in the grader's Triton interpreter)."""
    x = as_sent(_values(rng, PASSES_N, "positive"), "fp32")
    value, launches = student.profiled_call("vector_sum", x=x, dtype="fp32", returns="number", dialect="triton")
    assert_close(value, _truth(torch.sum)(x=x, dtype="fp32"), rtol=tolerance("fp32")[0],
                 where=f"vector_sum of {PASSES_N} float32 elements")
    if not launches:
        raise CheckFailure(f"vector_sum of {PASSES_N} elements launched no Triton kernel: reduce in your kernels")
    if any(launch["atomics"] for launch in launches):
        raise CheckFailure("vector_sum adds partial sums with atomics, in whatever order the programs finish, so a "
                           "float sum changes from run to run (the interpreter runs them in order and hides it): "
                           "store each program's partial sum and reduce them in a second pass.")
    first = launches[0]
    if first["programs"] < MIN_PROGRAMS:
        walk = "s, which walk" if first["programs"] > 1 else ", which walks"
        raise CheckFailure(f"the first pass of vector_sum over {PASSES_N} elements runs {first['programs']} "
                           f"program{walk} the whole vector while the GPU's other multiprocessors idle: launch "
                           "cdiv(n, BLOCK) programs and reduce their partial results in further passes.")


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402
from aisys_grader.checks import require_gpu  # noqa: E402

SPEED_N = 2**28
SPEED_BYTES = 4 * SPEED_N  # each element read once
SPEED = speed.Workload(
    "vector_sum", (speed.Input((SPEED_N,), "fp32", mean=1.0),), args=("fp32",),
    reference=lambda x, dtype: x.double().sum(), rtol=1e-5,
    limit=speed.copy_limit(SPEED_BYTES), work=SPEED_BYTES, unit="bytes",
    label="a vector of 2**28 fp32 elements", reps=400, floor=0.06,
    hint="Each pass is one launch over the whole vector, so the first reads it once and the next ones have only "
         "its partial results to add; a launch per slice makes the GPU wait for the host between them.")


@check(points=1)
def vector_sum_speed(student, rng, hidden):
    """On a GPU: vector_sum of 2**28 fp32 elements reads them at 6% or more of the copy bandwidth.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against a copy of as many
    bytes in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.06)


@check(points=1)
def vector_sum_near_copy_speed(student, rng, hidden):
    """On a GPU: vector_sum of 2**28 fp32 elements reads them at 12% or more of the copy bandwidth."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.12)
