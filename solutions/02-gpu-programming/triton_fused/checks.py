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
