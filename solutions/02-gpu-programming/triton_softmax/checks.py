"""Checks: softmax over rows, fused and online, stable at +-1e4 and with -inf.

Expected values come from torch.softmax on the CPU in float64, rounded to the
data's dtype. float16 and bfloat16 results are compared within one unit in the
last place of their dtype (compare.TOLERANCES); float32 with rtol 1e-5 and
atol 1e-7, since a GPU's exp is accurate to a few units in the last place.
Rows of only -inf must give NaN, as torch does.

Ordinary data (standard normal times 3) never overflows float32 even without
subtracting the maximum, so the *_stable checks are separate: rows near +1e4
(exp overflows), near -1e4 (every exp underflows: 0 / 0), uniform in +-1e4,
scattered -inf, a leading run of -inf longer than a block (the online pass's
running max is -inf), a single finite entry, a row of the dtype's largest and
smallest normal numbers, and a row of only -inf. Every matrix holds a row of
each kind: each mistake shows on every seed. Hidden shapes cover one element,
either side of a power of two (127, 128, 129), rows of 1000 and of 5000 in
blocks of 64 to 1024, and every dtype. On a CPU each program runs in Triton's
interpreter: few rows. Results must be in the data's dtype (bf16 as float32).

`softmax_passes` runs both functions in the grader's Triton interpreter (the
clean room) and counts what they read: the fused softmax reads each element
once, the online one twice, in blocks no wider than the block it is given.
"""

import numpy as np
import torch

from aisys.triton_kernels import softmax as reference  # noqa: F401  the answer key: kept out of the grading kernel
from aisys.tensors import TORCH_DTYPES

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import FORMATS, CheckFailure, assert_close, tolerance
from aisys_grader.low_precision import as_sent


DTYPES = tuple(TORCH_DTYPES)
# fp32: rtol looser than compare.TOLERANCES (a GPU's exp is approximate), atol tighter (probabilities can be tiny)
TOLERANCE = {"fp32": (1e-5, 1e-7), "fp16": tolerance("fp16"), "bf16": tolerance("bf16")}
EDGE_COLS = (1, 7, 127, 128, 129, 1000)
LARGE = 1e4
STABLE_KINDS = ("near +1e4", "near -1e4", "uniform +-1e4", "some -inf", "leading -inf", "one finite", "extremes",
                "all -inf")


def _expected(x, dtype, block=None):
    """torch.softmax over rows in float64, rounded to `dtype` (as float32: numpy has no bfloat16)."""
    return torch.softmax(torch.from_numpy(np.asarray(x, np.float64)), dim=1).to(TORCH_DTYPES[dtype]).float().numpy()


def _row(rng, cols, kind, block, dtype):
    """One row of `kind`; `block` is the online block (a leading run of -inf covers at least one)."""
    if kind == "extremes":  # the largest normal number, its negative, the smallest normal ones and 0, in turn
        info = torch.finfo(TORCH_DTYPES[dtype])
        return np.resize([info.max, -info.max, info.tiny, -info.tiny, 0.0], cols)
    if kind == "ordinary":
        return 3 * rng.standard_normal(cols)
    if kind == "near +1e4":
        return LARGE + 3 * rng.standard_normal(cols)
    if kind == "near -1e4":
        return -LARGE + 3 * rng.standard_normal(cols)
    if kind == "uniform +-1e4":
        return rng.uniform(-LARGE, LARGE, cols)
    row = 3 * rng.standard_normal(cols)
    if kind == "some -inf":
        row[rng.random(cols) < 0.3] = -np.inf
    elif kind == "leading -inf":
        row[:min(cols - 1, block + int(rng.integers(0, block)))] = -np.inf
    elif kind == "one finite":
        row[np.arange(cols) != rng.integers(cols)] = -np.inf
    elif kind == "all -inf":
        row[:] = -np.inf
    return row


def _matrix(rng, shape, kinds, block, dtype):
    """A (rows, cols) matrix whose row i is of kinds[i % len(kinds)]."""
    rows, cols = shape
    return (np.stack([_row(rng, cols, kinds[i % len(kinds)], block, dtype) for i in range(rows)]) if rows
            else np.zeros(shape))


def _hint(case, got, expected) -> str:
    """What the kind of difference between `got` and `expected` usually means (for softmax_online: a block given)."""
    online = "block" in case
    if got.shape != expected.shape:
        return "Return an array of x's shape (rows, cols)."
    if got.dtype != np.dtype(FORMATS[case["dtype"]]):
        return "Allocate the output in the data's dtype (torch.empty_like(t)): the kernel's store rounds to it."
    if (np.isnan(got) & ~np.isnan(expected)).any():
        hint = ("NaN where torch gives numbers: subtract the row's maximum before tl.exp (exp(1e4) overflows to inf, "
                "and near -1e4 every exp underflows to 0, so the division is inf / inf or 0 / 0).")
        if online:
            hint += (" In the online pass, while every entry so far is -inf, m and m_new are both -inf and "
                     "exp(m - m_new) is NaN, which spoils d for the rest of the row: use a finite stand-in for m_new "
                     "in the exps then (m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)).")
        return hint
    if (np.isnan(expected) & ~np.isnan(got)).any():
        return ("A row of only -inf has no finite maximum: torch.softmax gives NaN there, and so does exp(x - m) / d "
                "with m = -inf. A number there means some lane held something else than -inf: pad masked loads "
                "with other=float('-inf'), never 0.")
    if online:
        return ("When a block raises the running max from m to m_new, the running sum so far was taken against m: "
                "d = d * exp(m - m_new) + sum(exp(x - m_new)). Mask every load of the last, partial block with "
                "other=float('-inf').")
    return ("Lanes past n_cols must load other=float('-inf'): neither the max nor the sum may see them (with 0, each "
            "adds exp(-m) to the sum). Row `row` starts at x_ptr + row * x.stride(0).")


def _matches_torch(student, function, cases, hidden):
    """Each case against torch, within its dtype's tolerance; a wrong value says what the difference suggests."""
    compare_cases(student, function, cases, _expected, returns="array", hidden=hidden,
                  tolerance=lambda case: TOLERANCE[case["dtype"]], dtype=lambda case: case["dtype"], hint=_hint)


def _cases(rng, hidden, kinds, online):
    """Cases (x, dtype[, block]): visible ones few and fixed; hidden ones over the edges and every dtype."""
    rows = max(3, len(kinds))  # several rows: each program must find its own; every kind of row in each matrix
    if not hidden:
        plan = [((rows, 100), "fp32", 32), ((rows, 1000), "fp16", 128), ((rows, 129), "bf16", 64)]
    else:
        plan = [((rows, cols), dtype, int(rng.choice([64, 128, 256]))) for cols in EDGE_COLS for dtype in DTYPES]
        plan += [((int(rng.integers(1, 5)), int(rng.integers(2, 2000))), dtype, 64) for dtype in DTYPES]
        plan.append(((2, 5000), "fp32", 1024 if online else 128))
        plan.append(((1, 1), "fp16", 16))
        plan += [((0, 5), "fp32", 16), ((3, 0), "bf16", 16)]
    cases = []
    for shape, dtype, block in plan:
        case = {"x": as_sent(_matrix(rng, shape, kinds, block, dtype), dtype), "dtype": dtype}
        cases.append(dict(case, block=block) if online else case)
    return cases


@check(points=2)
def softmax_rows(student, rng, hidden):
    """softmax_rows(x, dtype) matches torch.softmax over rows, for ragged row lengths, empties and every dtype."""
    _matches_torch(student, "softmax_rows", _cases(rng, hidden, ("ordinary",), online=False), hidden)


@check(points=2)
def softmax_rows_stable(student, rng, hidden):
    """softmax_rows stays right at +-1e4 and with -inf entries; a row of only -inf gives NaN, as torch."""
    _matches_torch(student, "softmax_rows", _cases(rng, hidden, STABLE_KINDS, online=False), hidden)


@check(points=3)
def softmax_online(student, rng, hidden):
    """softmax_online(x, block, dtype) matches torch.softmax on rows of many blocks (and of one)."""
    _matches_torch(student, "softmax_online", _cases(rng, hidden, ("ordinary",), online=True), hidden)


@check(points=2)
def softmax_online_stable(student, rng, hidden):
    """softmax_online stays right at +-1e4, with -inf entries and with a leading run of -inf longer than a block."""
    _matches_torch(student, "softmax_online", _cases(rng, hidden, STABLE_KINDS, online=True), hidden)


PASSES_SHAPE, PASSES_BLOCK = (2, 1000), 128


def _reads(launches, what: str) -> float:
    """How many times the launches read (`loaded`) or wrote (`stored`) each element of a PASSES_SHAPE matrix."""
    return sum(launch[what] for launch in launches) / (PASSES_SHAPE[0] * PASSES_SHAPE[1])


def _times(count: float) -> str:
    return {0: "no times", 1: "once", 2: "twice"}.get(count, f"{count:g} times")


@check(points=2)
def softmax_passes(student, rng, hidden):
    """softmax_rows reads each element once and softmax_online twice, in blocks no wider than its block, and both
    write each once (counted in the grader's Triton interpreter)."""
    x = as_sent(_matrix(rng, PASSES_SHAPE, ("ordinary",), PASSES_BLOCK, "fp32"), "fp32")
    expected = _expected(x, "fp32")
    got, fused = student.profiled_call("softmax_rows", x=x, dtype="fp32", returns="array", dialect="triton")
    assert_close(got, expected, rtol=TOLERANCE["fp32"][0], atol=TOLERANCE["fp32"][1],
                 where=f"softmax_rows of a {PASSES_SHAPE} float32 matrix")
    reads, writes = _reads(fused, "loaded"), _reads(fused, "stored")
    if (reads, writes) != (1, 1):
        raise CheckFailure(f"softmax_rows of a {PASSES_SHAPE} matrix reads each element {_times(reads)} and writes "
                           f"it {_times(writes)} in {len(fused)} launch(es): softmax is bound by memory, so load "
                           "each row once into one program's block, compute max, exp, sum and quotient there, and "
                           "store it once.")
    got, online = student.profiled_call("softmax_online", x=x, block=PASSES_BLOCK, dtype="fp32", returns="array",
                                        dialect="triton")
    assert_close(got, expected, rtol=TOLERANCE["fp32"][0], atol=TOLERANCE["fp32"][1],
                 where=f"softmax_online of a {PASSES_SHAPE} float32 matrix, block {PASSES_BLOCK}")
    widest = max((launch["widest_load"] for launch in online), default=0)
    if widest > PASSES_BLOCK:
        raise CheckFailure(f"softmax_online(x, block={PASSES_BLOCK}) loads {widest} elements at once: a row longer "
                           "than a block does not fit one program's registers (it spills); walk the row in blocks "
                           "of `block` with the online max and sum.")
    reads, writes = _reads(online, "loaded"), _reads(online, "stored")
    if reads > 2 or writes != 1:
        raise CheckFailure(f"softmax_online of a {PASSES_SHAPE} matrix in blocks of {PASSES_BLOCK} reads each "
                           f"element {_times(reads)} and writes it {_times(writes)}: find the max and the sum in one "
                           "pass, rescaling the running sum when the max grows (d = d * exp(m - m_new) + ...), then "
                           "read the row a second time to write it.")


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402
from aisys_grader.checks import require_gpu  # noqa: E402

SPEED_ROWS, SPEED_COLS = 16384, 4096
SPEED_BYTES = 2 * SPEED_ROWS * SPEED_COLS * 4  # each element read once and written once
SPEED = speed.Workload(
    "softmax_rows", (speed.Input((SPEED_ROWS, SPEED_COLS), "fp32", std=3.0),), args=("fp32",),
    reference=lambda x, dtype: torch.softmax(x, dim=1), rtol=1e-5,
    limit=speed.copy_limit(SPEED_BYTES), work=SPEED_BYTES, unit="bytes",
    label=f"a {SPEED_ROWS} x {SPEED_COLS} fp32 matrix", reps=2400, floor=0.4,
    hint="A fused softmax is bound by memory: one program per row, the row in registers, reads and writes each "
         "element once, and runs near the copy bandwidth.")


@check(points=1)
def softmax_rows_speed(student, rng, hidden):
    """On a GPU: softmax_rows of a 16384 x 4096 fp32 matrix moves its bytes at 40% or more of the copy bandwidth.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against a copy of as many
    bytes in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.4)


@check(points=1)
def softmax_rows_near_copy_speed(student, rng, hidden):
    """On a GPU: softmax_rows of a 16384 x 4096 fp32 matrix moves its bytes at 70% or more of the copy bandwidth."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.7)
