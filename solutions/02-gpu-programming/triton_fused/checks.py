"""Checks: y = gelu(x + bias) + residual in one Triton kernel, and its traffic.

The truth is torch in float64 on the same values, with the exact (erf) GELU,
F.gelu's default: inputs of float16 or bfloat16 are rounded to that dtype
first (they travel as float32), and results are compared with that dtype's
tolerance. float32 cases come first, where the tanh approximation (off by up to
5e-4) cannot pass. Shapes are ragged against a block of 1024 columns and
rectangular both ways, so a bias indexed by row shows. The traffic functions
are compared exactly with the reference's count.
"""

import torch
import torch.nn.functional as F

from aisys.triton_kernels import fused as reference
from aisys.tensors import TORCH_DTYPES

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import tolerance
from aisys_grader.low_precision import rounded


def _case(rng, M, N, dtype) -> dict:
    # x + bias spread over [-6, 6], where GELU bends: exact and tanh GELU differ most near |t| = 2 to 3.
    return {"x": rounded(2 * rng.standard_normal((M, N)), dtype),
            "bias": rounded(rng.standard_normal(N), dtype),
            "residual": rounded(rng.standard_normal((M, N)), dtype), "dtype": dtype}


def _truth(x, bias, residual, dtype):
    x, bias, residual = (torch.from_numpy(a).double() for a in (x, bias, residual))
    return (F.gelu(x + bias) + residual).numpy()


def _shapes(rng, hidden) -> list[tuple[int, int, str]]:
    if not hidden:
        return [(3, 40, "fp32"), (5, 1100, "fp32"), (2, 300, "fp16")]
    shapes = [(1, 1, "fp32"), (6, 1, "fp32"), (9, 7, "fp32"), (12, 1000, "fp32"), (2, 5000, "fp32"), (0, 7, "fp32"),
              (int(rng.integers(2, 20)), int(rng.integers(1025, 3000)), "fp32")]
    for dtype in ("fp16", "bf16"):
        shapes += [(9, 7, dtype), (4, 1000, dtype), (1, 5000, dtype)]
    return shapes


@check(points=3)
def bias_gelu_residual(student, rng, hidden):
    """bias_gelu_residual matches F.gelu(x + bias) + residual, exact GELU: ragged shapes, float32, float16, bfloat16."""
    cases = [_case(rng, M, N, dtype) for M, N, dtype in _shapes(rng, hidden)]
    compare_cases(student, "bias_gelu_residual", cases, _truth, returns="array", hidden=hidden,
                  tolerance=lambda case: tolerance(case["dtype"]))  # a float32 computation rounded once


@check(points=2)
def traffic(student, rng, hidden):
    """unfused_bytes and fused_bytes count exactly the bytes of torch's three kernels and of the fused one."""
    if hidden:
        sizes = [(1, 1, "fp32"), (1, 768, "bf16"), (7, 1, "fp16"),
                 (int(rng.integers(1, 10_000)), int(rng.integers(1, 20_000)), str(rng.choice(list(TORCH_DTYPES))))]
    else:
        sizes = [(4096, 4096, "fp32"), (8, 768, "bf16")]
    cases = [{"M": M, "N": N, "dtype": dtype} for M, N, dtype in sizes]
    for function in ("fused_bytes", "unfused_bytes"):
        compare_cases(student, function, cases, getattr(reference, function), returns="number", hidden=hidden,
                      tolerance=(0, 0))


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402
from aisys_grader.checks import require_gpu  # noqa: E402

SPEED_M, SPEED_N = 16384, 8192
SPEED_BYTES = reference.fused_bytes(SPEED_M, SPEED_N, "bf16")  # x and residual read, y written, bias
SPEED = speed.Workload(
    "triton_bias_gelu_residual", (speed.Input((SPEED_M, SPEED_N), "bf16"), speed.Input((SPEED_N,), "bf16"),
                                  speed.Input((SPEED_M, SPEED_N), "bf16")),
    reference=lambda x, bias, residual: (F.gelu(x.float() + bias.float()) + residual.float()).to(x.dtype),
    rtol=8e-3, limit=speed.copy_limit(SPEED_BYTES), work=SPEED_BYTES, unit="bytes",
    label=f"a {SPEED_M} x {SPEED_N} bf16 matrix", reps=1400, floor=0.4,
    hint="Fused, the chain reads x and the residual once and writes y once; each separate op reads and writes a "
         "whole matrix again.")


@check(points=1)
def bias_gelu_residual_speed(student, rng, hidden):
    """On a GPU: triton_bias_gelu_residual of 16384 x 8192 bf16 moves its bytes at 40% or more of the copy bandwidth.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against a copy of as many
    bytes in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.4)


@check(points=1)
def bias_gelu_residual_near_copy_speed(student, rng, hidden):
    """On a GPU: triton_bias_gelu_residual of 16384 x 8192 bf16 moves its bytes at 60% or more of the copy bandwidth."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.6)
