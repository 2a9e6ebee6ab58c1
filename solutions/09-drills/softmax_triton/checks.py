"""Checks: a fused row-wise softmax in Triton, float32, stable at +-1e4 and with -inf, one read and one write.

Expected values are torch.softmax in float64 of the float32 inputs, compared with rtol 1e-5 and
atol 1e-7 (a GPU's exp is accurate to a few units in the last place). Rows of only -inf must give
NaN, as torch does. `softmax` covers the shapes (one column, either side of a power of two, one row,
empty matrices) on ordinary data, 3 times standard normal, which never overflows even without
subtracting the max; `softmax_stable` holds in every matrix a row of each hard kind (near +1e4,
near -1e4, uniform in +-1e4, scattered -inf, a leading run of -inf, one finite entry, only -inf) and
adds a property check on small matrices of such values. `softmax_one_pass` runs softmax in the
grader's Triton interpreter (the clean room) and counts its launch: one program per row, each
element read once and written once. On a CPU every program runs in the interpreter: a few hundred
rows at most.
"""

import numpy as np
import torch
from hypothesis import strategies as st

from aisys.triton_kernels import softmax as reference  # noqa: F401  the answer key: kept out of the grading kernel

from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import CheckFailure, assert_close

TOLERANCE = (1e-5, 1e-7)
LARGE = 1e4
KINDS = ("near +1e4", "near -1e4", "uniform +-1e4", "some -inf", "leading -inf", "one finite", "all -inf")
# small matrices of values that overflow exp, underflow it, or are -inf
ELEMENTS = st.one_of(st.floats(-LARGE, LARGE, width=32), st.sampled_from([-np.inf, LARGE, -LARGE, 0.0]))
SMALL = st.tuples(st.integers(1, 3), st.integers(1, 16)).flatmap(
    lambda shape: st.lists(ELEMENTS, min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]).map(
        lambda values: {"x": np.array(values, np.float32).reshape(shape)}))


def _expected(x):
    """torch.softmax over rows in float64, as float32."""
    return torch.softmax(torch.from_numpy(x.astype(np.float64)), dim=1).float().numpy()


def _row(rng, cols, kind):
    row = 3 * rng.standard_normal(cols)
    if kind == "near +1e4":
        return LARGE + row
    if kind == "near -1e4":
        return -LARGE + row
    if kind == "uniform +-1e4":
        return rng.uniform(-LARGE, LARGE, cols)
    if kind == "some -inf":
        row[rng.random(cols) < 0.3] = -np.inf
    elif kind == "leading -inf":
        row[:max(cols - 1, 0) // 2 + 1] = -np.inf
        row[-1] = 0.0
    elif kind == "one finite":
        row[np.arange(cols) != rng.integers(cols)] = -np.inf
    elif kind == "all -inf":
        row[:] = -np.inf
    return row


def _matrix(rng, rows, cols, kinds=("ordinary",)):
    """A float32 (rows, cols) matrix whose row i is of kinds[i % len(kinds)]."""
    if not (rows and cols):
        return np.zeros((rows, cols), np.float32)
    return np.stack([_row(rng, cols, kinds[i % len(kinds)]) for i in range(rows)]).astype(np.float32)


def _hint(case, got, expected):
    """What the kind of difference usually means."""
    if got.shape != expected.shape or got.dtype != np.float32:
        return "Return a float32 matrix of x's shape."
    if (np.isnan(got) & ~np.isnan(expected)).any():
        return ("NaN where torch gives numbers: subtract the row's maximum before tl.exp (exp(1e4) is inf, and "
                "near -1e4 every exp is 0, so the quotient is inf / inf or 0 / 0).")
    if (np.isnan(expected) & ~np.isnan(got)).any():
        return ("A row of only -inf has no finite maximum: torch.softmax gives NaN there, and so does exp(x - m) / d "
                "with m = -inf. A number there means a padding lane held something else than -inf: load with "
                "other=float('-inf'), never 0.")
    return ("Padding lanes past n_cols must load other=float('-inf'): neither the max nor the sum may see them "
            "(with 0, each adds exp(-m) to the sum). Row `row` starts at x_ptr + row * x.stride(0).")


def _compare(student, cases, hidden):
    compare_cases(student, "softmax", [{"x": x} for x in cases], _expected, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float32", hint=_hint)


@check(points=2)
def softmax(student, rng, hidden):
    """softmax(x) matches torch.softmax over rows: one column, ragged widths, one row, empty matrices."""
    cases = [_matrix(rng, 4, 100), _matrix(rng, 3, 129), _matrix(rng, 2, 8)]
    if hidden:
        cases = [_matrix(rng, 3, cols) for cols in (1, 7, 127, 128, 129)]
        cases += [_matrix(rng, 1, int(rng.integers(2, 1000))), _matrix(rng, int(rng.integers(20, 60)), 33),
                  _matrix(rng, 0, 5), _matrix(rng, 3, 0)]
    _compare(student, cases, hidden)


@check(points=2)
def softmax_stable(student, rng, hidden):
    """softmax stays right at +-1e4 and with -inf entries; a row of only -inf gives NaN, as torch does."""
    cases = [_matrix(rng, len(KINDS), 100, KINDS)]
    if hidden:
        cases = [_matrix(rng, len(KINDS), cols, KINDS) for cols in (2, 63, 64, 65, int(rng.integers(100, 1000)))]
    _compare(student, cases, hidden)
    if hidden:
        compare_property(student, "softmax", SMALL, _expected, rng=rng, returns="array", hidden=hidden, examples=10,
                         tolerance=TOLERANCE, dtype="float32", hint=_hint)


PASS_SHAPE = (4, 300)


@check(points=1)
def softmax_one_pass(student, rng, hidden):
    """softmax runs one launch of one program per row that reads each element once and writes it once (counted
    in the grader's Triton interpreter)."""
    x = _matrix(rng, *PASS_SHAPE)
    got, launches = student.profiled_call("softmax", x=x, returns="array", dialect="triton")
    assert_close(got, _expected(x), rtol=TOLERANCE[0], atol=TOLERANCE[1],
                 where=f"softmax of a {PASS_SHAPE} float32 matrix (before its loads are counted)")
    rows, cols = PASS_SHAPE
    if not launches:
        raise CheckFailure(f"softmax of a {PASS_SHAPE} matrix launches no Triton kernel: compute it in softmax_kernel, "
                           f"launched on a grid of (rows,) = ({rows},) programs.")
    if len(launches) != 1 or launches[0]["programs"] != rows:
        programs = " and ".join(str(launch["programs"]) for launch in launches)
        raise CheckFailure(f"softmax of a {PASS_SHAPE} matrix runs {len(launches)} launch(es) of {programs} "
                           f"program(s): launch softmax_kernel once, on a grid of (rows,) = ({rows},) programs.")
    read, written = launches[0]["loaded"] / (rows * cols), launches[0]["stored"] / (rows * cols)
    if (read, written) != (1, 1):
        raise CheckFailure(f"softmax of a {PASS_SHAPE} matrix reads {read:g} and writes {written:g} times the "
                           "elements of x: softmax is bound by memory, so load each row once into the program's "
                           "block, compute max, exp, sum and quotient there, and store it once.")
