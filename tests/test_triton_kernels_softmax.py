"""The Triton softmax reference: fused and online, stable at large magnitudes and with -inf, as torch.softmax."""

import pytest
import torch

from aisys.triton_kernels.softmax import softmax, softmax_online, softmax_rows

# The interpreter computes with numpy, which warns where -inf - (-inf) gives the NaN of a row of only -inf.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rtol, atol) against float64: one unit in the last place of the dtype (the interpreter truncates to bfloat16).
TOL = {torch.float32: (1e-5, 1e-7), torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}
FUNCTIONS = [softmax_rows, lambda x: softmax_online(x, 128), lambda x: softmax_online(x, 32), softmax]


def _expected(x):
    return torch.softmax(x.double(), dim=1).to(x.dtype)


def _assert_matches(out, x):
    assert out.shape == x.shape and out.dtype == x.dtype
    rtol, atol = TOL[x.dtype]
    torch.testing.assert_close(out.double().cpu(), _expected(x).double().cpu(), rtol=rtol, atol=atol, equal_nan=True)


def _data(device, shape, dtype, scale=3.0, seed=0):
    return (scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed))).to(dtype).to(device)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 127), (3, 128), (2, 129), (4, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_matches_torch(function, shape, dtype, torch_device):
    x = _data(torch_device, shape, dtype, seed=shape[1])
    _assert_matches(function(x), x)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_magnitudes_and_minus_infinity(function, dtype, torch_device):
    x = _data(torch_device, (6, 300), dtype, scale=1e4)
    x[1, ::3] = float("-inf")  # some -inf: 0 there
    x[2, :200] = float("-inf")  # a leading run of -inf longer than a block: the online pass must not make NaN
    x[3] = float("-inf")  # all -inf: NaN, as torch
    x[4, 17] = float("inf")  # +inf: NaN everywhere (inf - inf), as torch
    out = function(x)
    _assert_matches(out, x)
    assert out[1, ::3].eq(0).all() and out[3].isnan().all() and not out[2].isnan().any()


def test_long_rows_take_the_online_path(torch_device):
    x = _data(torch_device, (2, 20000), torch.float32, scale=1e3)
    x[1, :17000] = float("-inf")
    _assert_matches(softmax(x), x)
    _assert_matches(softmax_online(x), x)


def test_rows_sum_to_one(torch_device):
    x = _data(torch_device, (3, 5000), torch.float32, scale=50.0)
    for out in (softmax_rows(x), softmax_online(x, 256)):
        torch.testing.assert_close(out.sum(1), torch.ones(3, device=torch_device), rtol=0, atol=1e-5)


def test_empty_and_strided_inputs(torch_device):
    for shape in [(0, 5), (3, 0)]:
        assert softmax_rows(torch.zeros(shape, device=torch_device)).shape == shape
        assert softmax_online(torch.zeros(shape, device=torch_device), 64).shape == shape
    x = _data(torch_device, (6, 300), torch.float32)[::2, 10:260]
    _assert_matches(softmax_rows(x), x)
    _assert_matches(softmax_online(x, 64), x)


@pytest.mark.parametrize("call, message", [
    (lambda device: softmax_rows([[1.0]]), "x must be a torch.Tensor"),
    (lambda device: softmax_rows(torch.zeros(3, device=device)), "x must be a 2-D tensor"),
    (lambda device: softmax(torch.zeros(2, 2, dtype=torch.float64, device=device)), "x must have dtype"),
    (lambda device: softmax_online(torch.zeros(2, 2, device=device), 100), "block must be a power of two"),
    (lambda device: softmax_online(torch.zeros(2, 2, device=device), 0), "block must be an integer >= 1"),
])
def test_softmax_rejects_what_it_cannot_do(call, message, torch_device):
    with pytest.raises(ValueError, match=message):
        call(torch_device)
