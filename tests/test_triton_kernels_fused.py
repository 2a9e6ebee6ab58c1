"""The fused bias + GELU + residual reference matches torch's three kernels, and its traffic count."""

import pytest
import torch
import torch.nn.functional as F

from aisys import roofline
from aisys.triton_kernels.fused import (bias_gelu_residual, bias_gelu_residual_unfused, fused_bytes, fusion_speedup,
                                        unfused_bytes)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}


def _data(device, shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    M, N = shape
    return tuple(t.to(dtype).to(device) for t in
                 (2 * torch.randn(shape, generator=g), torch.randn(N, generator=g), torch.randn(shape, generator=g)))


@pytest.mark.parametrize("block", [1024, 16])
@pytest.mark.parametrize("shape", [(1, 1), (9, 7), (3, 1000), (2, 2049), (0, 5)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_chain_matches_exact_gelu(block, shape, dtype, torch_device):
    x, b, r = _data(torch_device, shape, dtype, seed=shape[1])
    y = bias_gelu_residual(x, b, r, block=block)
    expected = F.gelu(x.double() + b.double()) + r.double()  # exact (erf) GELU, computed in float64
    assert y.dtype == dtype and y.shape == x.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y.double().cpu(), expected.cpu(), rtol=rtol, atol=atol)


def test_fused_is_closer_to_exact_than_the_unfused_chain_in_float16(torch_device):
    # float16, not bfloat16: Triton 3.9's interpreter truncates float32 to bfloat16 instead of rounding it.
    x, b, r = _data(torch_device, (16, 1000), torch.float16)
    exact = F.gelu(x.double() + b.double()) + r.double()
    fused_error = (bias_gelu_residual(x, b, r).double() - exact).abs().max()
    unfused_error = (bias_gelu_residual_unfused(x, b, r).double() - exact).abs().max()
    assert fused_error <= unfused_error


@pytest.mark.parametrize("M, N, dtype", [(1, 1, "fp32"), (4096, 4096, "bf16"), (7, 3, "fp16")])
def test_traffic_counts_seven_and_three_matrices(M, N, dtype):
    size = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    assert unfused_bytes(M, N, dtype) == (7 * M * N + N) * size
    assert fused_bytes(M, N, dtype) == (3 * M * N + N) * size
    assert fusion_speedup(M, N, dtype) == pytest.approx((7 * M * N + N) / (3 * M * N + N))
    assert fused_bytes(M, N, dtype) == roofline.elementwise(M * N, dtype, inputs=2).bytes + N * size


@pytest.mark.parametrize("call, message", [
    (lambda x, b, r: bias_gelu_residual(x, b[:3], r), r"bias must have shape \(7,\)"),
    (lambda x, b, r: bias_gelu_residual(x, b, r[:1]), "residual must have x's shape"),
    (lambda x, b, r: bias_gelu_residual(x, b.half(), r), "bias must have x's dtype"),
    (lambda x, b, r: bias_gelu_residual(x, b, r, block=100), "block must be a power of two"),
    (lambda x, b, r: bias_gelu_residual(x[0], b, r), "x must be a 2-D tensor"),
    (lambda x, b, r: unfused_bytes(0, 5), "M must be an integer >= 1"),
    (lambda x, b, r: fused_bytes(3, 5, "fp12"), "dtype must be one of"),
])
def test_bad_arguments_are_named(call, message, torch_device):
    with pytest.raises(ValueError, match=message):
        call(*_data(torch_device, (2, 7), torch.float32))
