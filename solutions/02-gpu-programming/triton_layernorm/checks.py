"""Checks: LayerNorm and RMSNorm forward, one Triton program per row.

The truth is torch's own functions (F.layer_norm, F.rms_norm) in float64 on the
same values: inputs of float16 or bfloat16 are rounded to that dtype first (they
travel as float32), and results are compared with that dtype's tolerance, so a
kernel that computes in float32 and rounds once passes and one that computes in
the data's dtype does not. The `block` argument (columns per step) is chosen by
the checks, so rows of one block, of several, and ragged last blocks are all
graded. Three checks isolate what LayerNorm gets wrong most: the rows where eps
decides the result (constant rows, and variance below eps), and rows with a
mean of 1e4 and a spread of 1, where var = E[x^2] - E[x]^2 cancels
catastrophically in float32. Results must be in x's dtype, and both norms see,
on every seed, float16 rows with a spread of 300, whose squares pass 65504: a
kernel that computes its statistics in float16 turns them inf.
"""

import numpy as np
import torch
import torch.nn.functional as F

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import FORMATS, tolerance
from aisys_grader.low_precision import rounded


EPS = 1e-5
TINY_STD = 2e-3  # the spread of a "flat" row: variance 4e-6, below EPS
LARGE_MEAN = 1e4
# Rows near 1e4: float32 spacing there is about 1e-3, so a float32 kernel's error is about that (torch's own
# float32 layer_norm is off by up to 2e-3); E[x^2] - E[x]^2 in float32 is off by 1 to 1000.
LARGE_MEAN_TOLERANCE = 1e-2
# Flat rows: the distances x - mean are about 2e-3 and rstd about 270, so float32 rounding of the mean
# (1e-7 near 1) shows as about 1e-4 in y. eps misplaced or a biased/unbiased mix-up is off by 1e-2 or more.
FLAT_TOLERANCE = 1e-3
WIDE_SPREAD = 300  # float16 rows of this spread: their squares, up to some 1e6, are inf in float16 (above 65504)


def _layer_norm_case(x, rng, dtype, block, eps=EPS) -> dict:
    N = x.shape[1]
    weight = 1 + 0.5 * rng.standard_normal(N)
    bias = 0.5 * rng.standard_normal(N)
    return {"x": rounded(x, dtype), "weight": rounded(weight, dtype), "bias": rounded(bias, dtype),
            "eps": eps, "dtype": dtype, "block": block}


def _rows(rng, M, N) -> np.ndarray:
    """Rows with their own mean (within +-1) and spread (0.5 to 2): moderate, so only a wrong formula fails."""
    shift = rng.uniform(-1, 1, (M, 1))
    scale = rng.uniform(0.5, 2, (M, 1))
    return shift + scale * rng.standard_normal((M, N))


def _true_layer_norm(x, weight, bias, eps, dtype, block):
    N = x.shape[1]
    t = [torch.from_numpy(a).double() for a in (x, weight, bias)]
    return F.layer_norm(t[0], (N,), t[1], t[2], eps).numpy()


def _true_rms_norm(x, weight, eps, dtype, block):
    N = x.shape[1]
    return F.rms_norm(torch.from_numpy(x).double(), (N,), torch.from_numpy(weight).double(), eps).numpy()


def _dtype_tolerance(case) -> tuple[float, float]:
    """The tolerance of the case's data format: a kernel that computes in float32 and rounds once is within it."""
    return tolerance(case["dtype"])


def _format(case) -> str:
    return case["dtype"]


def _hint(case, got, expected) -> str:
    if got.dtype != np.dtype(FORMATS[case["dtype"]]):
        return "Allocate y in x's dtype (torch.empty_like(x)): the store rounds the float32 result to it."
    if not np.isfinite(got).all() or case["dtype"] == "fp16" and np.abs(case["x"]).max() > 1000:
        return ("Compute the statistics in float32: convert every load with .to(tl.float32) and keep the "
                "accumulators float32 (tl.zeros(..., dtype=tl.float32)); in float16 a square past 65504 is inf.")
    return ""


def _wide_rows(rng) -> np.ndarray:
    """float16 data whose squares overflow float16: two rows of 1000 with a spread of WIDE_SPREAD."""
    return WIDE_SPREAD * rng.standard_normal((2, 1000))


def _shapes(rng, hidden) -> list[tuple[int, int, str, int]]:
    """(M, N, dtype, block): visible, a ragged single block, an exact one and a loop; hidden, every edge."""
    if not hidden:
        return [(3, 10, "fp32", 16), (2, 64, "fp32", 64), (4, 100, "fp32", 32)]
    shapes = [(4, 1, "fp32", 1), (4, 7, "fp32", 8), (4, 7, "fp32", 4), (3, 1000, "fp32", 1024), (2, 1000, "fp32", 128),
              (2, 5000, "fp32", 1024), (1, int(rng.integers(300, 700)), "fp32", 256), (0, 7, "fp32", 8),
              (1, 1, "fp32", 1)]
    for dtype in ("fp16", "bf16"):
        shapes += [(3, 7, dtype, 8), (2, 1000, dtype, 256), (1, 5000, dtype, 1024)]
    return shapes


@check(points=3)
def layer_norm(student, rng, hidden):
    """layer_norm matches F.layer_norm: ragged rows, rows longer than a block, float32, float16 and bfloat16."""
    cases = [_layer_norm_case(_rows(rng, M, N), rng, dtype, block) for M, N, dtype, block in _shapes(rng, hidden)]
    cases.append(_layer_norm_case(_wide_rows(rng), rng, "fp16", 256))
    compare_cases(student, "layer_norm", cases, _true_layer_norm, returns="array", hidden=hidden,
                  tolerance=_dtype_tolerance, dtype=_format, hint=_hint)


@check(points=1)
def layer_norm_flat_rows(student, rng, hidden):
    """Constant rows (variance 0) and rows of variance below eps: eps inside the square root, variance over N."""
    shapes = [(10, 16)] if not hidden else [(7, 8), (1000, 256)]
    cases = []
    for N, block in shapes:
        constant = np.repeat(rng.uniform(-4, 4, (3, 1)), N, axis=1)
        z = rng.standard_normal((3, N))
        z = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)  # spread exactly TINY_STD
        flat = rng.uniform(-0.1, 0.1, (3, 1)) + TINY_STD * z
        cases.append(_layer_norm_case(np.concatenate([constant, flat]), rng, "fp32", block))
    compare_cases(student, "layer_norm", cases, _true_layer_norm, returns="array", hidden=hidden,
                  tolerance=(FLAT_TOLERANCE, FLAT_TOLERANCE))


@check(points=2)
def layer_norm_large_mean(student, rng, hidden):
    """Rows around 1e4 with a spread of 1 in float32: two passes (or Welford) are precise, E[x^2] - E[x]^2 is not."""
    shapes = [(4, 300, 128)]
    if hidden:
        shapes = [(4, 1000, 1024), (2, 5000, 1024), (3, int(rng.integers(1100, 1500)), 512)]
    cases = [_layer_norm_case(LARGE_MEAN + rng.standard_normal((M, N)), rng, "fp32", block) for M, N, block in shapes]
    compare_cases(student, "layer_norm", cases, _true_layer_norm, returns="array", hidden=hidden,
                  tolerance=(LARGE_MEAN_TOLERANCE, LARGE_MEAN_TOLERANCE))


@check(points=2)
def rms_norm(student, rng, hidden):
    """rms_norm matches F.rms_norm (no mean subtracted): ragged rows, long rows, a zero row, every dtype."""
    plan = [(_rows(rng, M, N), dtype, block) for M, N, dtype, block in _shapes(rng, hidden)]
    cases = []
    for x, dtype, block in plan + [(_wide_rows(rng), "fp16", 256)]:
        M, N = x.shape
        if hidden and M > 1:
            x[0] = 0  # rstd = 1 / sqrt(eps): y = 0, not NaN
        weight = 1 + 0.5 * rng.standard_normal(N)
        cases.append({"x": rounded(x, dtype), "weight": rounded(weight, dtype), "eps": 1e-6, "dtype": dtype,
                      "block": block})
    compare_cases(student, "rms_norm", cases, _true_rms_norm, returns="array", hidden=hidden,
                  tolerance=_dtype_tolerance, dtype=_format, hint=_hint)


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402
from aisys_grader.checks import require_gpu  # noqa: E402

SPEED_M, SPEED_N = 8192, 8192
SPEED_BYTES = 4 * (2 * SPEED_M * SPEED_N + 2 * SPEED_N)  # x read once, y written once, weight and bias
SPEED = speed.Workload(
    "triton_layer_norm", (speed.Input((SPEED_M, SPEED_N), "fp32", mean=0.5, std=2.0),
                          speed.Input((SPEED_N,), "fp32", mean=1.0, std=0.5), speed.Input((SPEED_N,), "fp32")),
    reference=lambda x, weight, bias: F.layer_norm(x, (x.shape[1],), weight, bias, eps=EPS), rtol=1e-4,
    limit=speed.copy_limit(SPEED_BYTES), work=SPEED_BYTES, unit="bytes",
    label=f"an {SPEED_M} x {SPEED_N} fp32 matrix", reps=1200, floor=0.2,
    hint="One program per row reads it from memory once (the second and third passes over a row of 32 KiB find it "
         "in the L2 cache) and writes y once; separate torch ops read and write the whole matrix at each step.")


@check(points=1)
def layer_norm_speed(student, rng, hidden):
    """On a GPU: triton_layer_norm of an 8192 x 8192 fp32 matrix moves its bytes at 20% or more of copy bandwidth.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against a copy of as many
    bytes in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.2)


@check(points=1)
def layer_norm_near_copy_speed(student, rng, hidden):
    """On a GPU: triton_layer_norm of an 8192 x 8192 fp32 matrix moves its bytes at 35% or more of copy bandwidth."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.35)
