"""The Triton GEMM reference: C = A @ B in float16 and bfloat16 with a float32 accumulator, for any shape."""

import functools

import pytest
import torch

from aisys.gemm_tiling import H100_SHARED_MEMORY_PER_BLOCK
from aisys.triton_kernels.matmul import GPU_CONFIGS, INTERPRETER_CONFIGS, matmul

DTYPES = [torch.float16, torch.bfloat16]
FRACTION_BITS = {torch.float16: 10, torch.bfloat16: 7}
# The interpreter's tile is 32 x 32 x 32: shapes either side of it, and of two tiles (grouped order of 2 rows).
SHAPES = [(1, 1, 1), (1, 40, 33), (33, 1, 100), (31, 33, 65), (32, 32, 32), (65, 64, 31), (70, 45, 2)]


def _data(device, shape, dtype, seed, low=None, high=None):
    """Standard normal, or uniform in [low, high), rounded to `dtype`."""
    generator = torch.Generator().manual_seed(seed)
    if low is None:
        x = torch.randn(shape, generator=generator)
    else:
        x = low + (high - low) * torch.rand(shape, generator=generator)
    return x.to(dtype).to(device)


def _assert_product(c, a, b):
    """c is a @ b rounded to the inputs' dtype: within one unit in its last place (the interpreter rounds toward zero
    to bfloat16), plus K float32 steps on the largest sum of |a||b| (a float32 accumulator's worst case)."""
    assert c.shape == (a.shape[0], b.shape[1]) and c.dtype == a.dtype and c.device == a.device
    a64, b64 = a.double().cpu(), b.double().cpu()
    expected = (a64 @ b64).to(a.dtype).double()
    atol = a.shape[1] * 2.0**-23 * (a64.abs() @ b64.abs()).max().item() + 2.0**-24
    torch.testing.assert_close(c.double().cpu(), expected, rtol=2.0 ** -FRACTION_BITS[a.dtype], atol=atol)


@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_matches_float64_product(M, N, K, dtype, torch_device):
    a, b = _data(torch_device, (M, K), dtype, seed=M), _data(torch_device, (K, N), dtype, seed=N)
    _assert_product(matmul(a, b), a, b)


def test_ten_rows_of_tiles_in_groups_of_eight(torch_device):
    """10 rows of tiles: the second group of GROUP_M = 8 rows is shorter, and must still cover its tiles."""
    a = _data(torch_device, (300, 20), torch.float16, seed=1)
    b = _data(torch_device, (20, 40), torch.float16, seed=2)
    _assert_product(matmul(a, b), a, b)


def test_strided_inputs(torch_device):
    """Strides come from the tensors: a transposed B and a slice of A with a row stride of 2 rows."""
    a = _data(torch_device, (80, 50), torch.bfloat16, seed=3)[::2, 5:45]
    b_t = _data(torch_device, (30, 40), torch.bfloat16, seed=4)
    _assert_product(matmul(a, b_t.t()), a, b_t.t())


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_k_of_positive_data_accumulates_in_float32(dtype, torch_device):
    """Positive data: every partial sum grows, so a float16 or bfloat16 accumulator would be off by many units."""
    a = _data(torch_device, (32, 2000), dtype, seed=5, low=0.0, high=1.0)
    b = _data(torch_device, (2000, 16), dtype, seed=6, low=0.0, high=1.0)
    _assert_product(matmul(a, b), a, b)


def test_float16_partial_sums_past_65504_stay_finite(torch_device):
    """The first half of K sums past float16's largest number and the second half cancels it: a float32 sum is fine."""
    a = _data(torch_device, (16, 256), torch.float16, seed=7, low=24.0, high=32.0)
    half = _data(torch_device, (128, 16), torch.float16, seed=8, low=24.0, high=32.0)
    b = torch.cat([half, -half])
    c = matmul(a, b)
    assert torch.isfinite(c).all()
    _assert_product(c, a, b)


def test_configs_fit_an_h100():
    """Every config: power-of-two tiles of at least 16, 4 or 8 warps, its pipeline within 227 KiB of shared memory."""
    for config in GPU_CONFIGS + INTERPRETER_CONFIGS:
        tiles = [config.kwargs[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
        assert all(t >= 16 and t & (t - 1) == 0 for t in tiles), config
        assert config.num_warps in (4, 8), config
        block_m, block_n, block_k = tiles
        assert config.num_stages * (block_m + block_n) * block_k * 2 <= H100_SHARED_MEMORY_PER_BLOCK, config


def _tensor(shape=(2, 2), dtype=torch.float16, *, device):
    return torch.zeros(shape, dtype=dtype, device=device)


@pytest.mark.parametrize("call, message", [
    (lambda t: matmul([[1.0]], t()), "a must be a torch.Tensor, got list"),
    (lambda t: matmul(t(), 2.0), "b must be a torch.Tensor, got float"),
    (lambda t: matmul(t((4,)), t()), r"a must be a 2-D matrix, got shape \(4,\)"),
    (lambda t: matmul(t(), t((2, 2, 2))), r"b must be a 2-D matrix, got shape \(2, 2, 2\)"),
    (lambda t: matmul(t((0, 2)), t()), r"a must not be empty, got shape \(0, 2\)"),
    (lambda t: matmul(t(), t((2, 0))), r"b must not be empty, got shape \(2, 0\)"),
    (lambda t: matmul(t(dtype=torch.float32), t()), "a must be float16 or bfloat16.*got torch.float32"),
    (lambda t: matmul(t(), t(dtype=torch.int32)), "b must be float16 or bfloat16.*got torch.int32"),
    (lambda t: matmul(t(), t(dtype=torch.bfloat16)), "a and b must have one dtype"),
    (lambda t: matmul(t((2, 3)), t((4, 2))), r"inner dimensions differ.*K = 3.*K = 4"),
    (lambda t: matmul(t(device="meta"), t()), "a must be on (cpu|cuda).*meta"),
])
def test_bad_input_names_the_argument(call, message, torch_device):
    with pytest.raises(ValueError, match=message):
        call(functools.partial(_tensor, device=torch_device))
