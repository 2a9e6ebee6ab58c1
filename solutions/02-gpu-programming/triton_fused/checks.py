"""Checks: y = gelu(x + bias) + residual in one Triton kernel, and its traffic.

The truth is torch in float64 on the same values, with the exact (erf) GELU,
F.gelu's default: inputs of float16 or bfloat16 are rounded to that dtype
first (they travel as float32), and results are compared with that dtype's
tolerance. float32 cases come first, where the tanh approximation (off by up to
5e-4) cannot pass. Shapes are ragged against a block of 1024 columns and
rectangular both ways, so a bias indexed by row shows. The traffic functions
are compared exactly with the reference's count. Results must be in the data's
dtype, and every seed has float16 and bfloat16 rows where x + bias is not a
number of that dtype (2048 + 0.5 in float16): rounding t or gelu(t) to it, as
torch's three kernels or a kernel computing in float16 do, loses the 0.5.

`fused_kernel` runs bias_gelu_residual in the grader's Triton interpreter (the
clean room) and counts what it launches: one kernel, reading x, bias and
residual once per element and writing y once.
"""

import numpy as np
import torch
import torch.nn.functional as F

from aisys.triton_kernels import fused as reference
from aisys.tensors import TORCH_DTYPES

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import FORMATS, CheckFailure, assert_close, tolerance
from aisys_grader.low_precision import rounded


def _case(rng, M, N, dtype) -> dict:
    # x + bias spread over [-6, 6], where GELU bends: exact and tanh GELU differ most near |t| = 2 to 3.
    return {"x": rounded(2 * rng.standard_normal((M, N)), dtype),
            "bias": rounded(rng.standard_normal(N), dtype),
            "residual": rounded(rng.standard_normal((M, N)), dtype), "dtype": dtype}


ROUNDED_AWAY = {"fp16": 2048.0, "bf16": 256.0}  # where the dtype's numbers are 2 apart: x + 0.5 is not one of them


def _rounded_away(dtype) -> dict:
    """Rows where y = gelu(x + 0.5) - x = 0.5 exactly, but x + 0.5 rounded to `dtype` is x: y comes out 0."""
    x = ROUNDED_AWAY[dtype] * np.ones((2, 9))
    x[1] *= -1  # gelu(-2048.5) is 0, so y = 2048: right either way, and the row shows a bias broadcast by row
    return {"x": rounded(x, dtype), "bias": rounded(np.full(9, 0.5), dtype), "residual": rounded(-x, dtype),
            "dtype": dtype}


def _hint(case, got, expected):
    if got.dtype != np.dtype(FORMATS[case["dtype"]]):
        return "Allocate y in x's dtype (torch.empty_like(x)): the store rounds the float32 result to it."
    once = "convert the loads to float32, compute t and gelu(t) in float32 in one kernel, and round once, in the store"
    if case["dtype"] in ROUNDED_AWAY and np.array_equal(case["x"], _rounded_away(case["dtype"])["x"]):
        return f"x + bias = x + 0.5 rounded to the data's dtype loses the 0.5: {once}."
    ulp = tolerance(case["dtype"])[0]
    if case["dtype"] != "fp32" and np.allclose(got, expected, rtol=8 * ulp, atol=8 * ulp):
        return (f"A few units in the last place of {case['dtype']} off: t or gelu(t) was rounded to it on the way "
                f"(as torch's three kernels do); {once}.")
    return ""


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
    cases += [_rounded_away("fp16"), _rounded_away("bf16")]
    compare_cases(student, "bias_gelu_residual", cases, _truth, returns="array", hidden=hidden,
                  tolerance=lambda case: tolerance(case["dtype"]),  # a float32 computation rounded once
                  dtype=lambda case: case["dtype"], hint=_hint)


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


FUSED_SHAPE = (6, 1500)  # two blocks of 1024 columns a row, the last ragged


@check(points=2)
def fused_kernel(student, rng, hidden):
    """bias_gelu_residual runs one kernel that reads x, bias and residual once per element and writes y once (counted
    in the grader's Triton interpreter)."""
    case = _case(rng, *FUSED_SHAPE, "fp32")
    got, launches = student.profiled_call("bias_gelu_residual", returns="array", dialect="triton", **case)
    rtol, atol = tolerance("fp32")
    assert_close(got, _truth(**case), rtol=rtol, atol=atol, where=f"bias_gelu_residual of {FUSED_SHAPE} matrices")
    elements = FUSED_SHAPE[0] * FUSED_SHAPE[1]
    reads, writes = (sum(launch[what] for launch in launches) / elements for what in ("loaded", "stored"))
    better = ("do it in one kernel that loads x, bias and residual once, keeps t and gelu(t) in registers and stores "
              "y once (3 elements read and 1 written per element of y).")
    if not launches:
        raise CheckFailure(f"bias_gelu_residual of {FUSED_SHAPE} matrices ran no Triton kernel: computed with torch, "
                           "the chain is three kernels, which write t and gelu(t) to memory and read them back; "
                           + better)
    if len(launches) != 1 or reads > 3 or writes != 1:
        raise CheckFailure(f"bias_gelu_residual of {FUSED_SHAPE} matrices runs {len(launches)} Triton kernels, "
                           f"which read {reads:g} and write {writes:g} elements per element of y: the chain is bound "
                           "by memory, so " + better)


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
