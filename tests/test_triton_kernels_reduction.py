"""The Triton reduction reference: vector sum and max in two passes, row sums and maxima, on the CPU or a GPU."""

import pytest
import torch

from aisys.triton_kernels import reduction
from aisys.triton_kernels.reduction import Config, row_max, row_sums, vector_max, vector_sum

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Rounding the float32 result to the dtype costs one unit in the last place (the interpreter truncates to bfloat16).
RTOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}
SMALL = Config(block=32, num_warps=1, programs_per_sm=3)  # several blocks a program, programs a chunk, on few elements


def _data(device, shape, dtype, seed=0):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


@pytest.mark.parametrize("n", [1, 7, 127, 128, 129, 1000, 2**16 + 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_sum_and_max_match_torch(n, dtype, torch_device):
    x = _data(torch_device, n, dtype, n) - 0.25
    total = vector_sum(x)
    assert total.shape == () and total.dtype == dtype
    torch.testing.assert_close(total.double().cpu(), x.double().sum().cpu(), rtol=RTOL[dtype], atol=1e-3)
    assert vector_max(x).item() == x.max().item()
    assert vector_max(-x - 1).item() == (-x - 1).max().item()  # all negative: padding must not be 0


@pytest.mark.parametrize("n", [1, 31, 32, 33, 95, 96, 97, 200, 1000])
def test_every_chunk_and_block_boundary(n, torch_device):
    x = torch.arange(1, n + 1, dtype=torch.float32, device=torch_device)
    assert vector_sum(x, SMALL).item() == n * (n + 1) // 2
    assert vector_max(-x, SMALL).item() == -1
    assert vector_max(x.flip(0).contiguous(), SMALL).item() == n


def test_launch_plan_spreads_blocks_over_the_programs(torch_device):
    cpu = Config(block=128, num_warps=4, programs_per_sm=4)
    if torch_device == "cpu":
        assert reduction._launch_plan(1, cpu) == (1, 1)
        assert reduction._launch_plan(128 * 4, cpu) == (4, 1)
        assert reduction._launch_plan(128 * 4 + 1, cpu) == (3, 2)  # 5 blocks: 2 + 2 + 1
        assert reduction._launch_plan(128 * 100, cpu) == (4, 25)


def test_minus_infinity_and_empty_vectors(torch_device):
    x = torch.full((300,), float("-inf"), device=torch_device)
    assert vector_max(x).item() == float("-inf")
    x[123] = -5.0
    assert vector_max(x).item() == -5.0
    empty = torch.zeros(0, device=torch_device)
    assert vector_sum(empty).item() == 0 and vector_sum(empty).shape == ()
    with pytest.raises(ValueError, match="at least one element"):
        vector_max(empty)


@pytest.mark.parametrize("shape", [(1, 1), (3, 1000), (5, 127), (4, 129), (2, 5000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_sums_and_max_match_torch(shape, dtype, torch_device):
    a = _data(torch_device, shape, dtype, shape[1]) - 0.5
    sums, maxima = row_sums(a), row_max(a)
    assert sums.shape == maxima.shape == (shape[0],) and sums.dtype == maxima.dtype == dtype
    torch.testing.assert_close(sums.double().cpu(), a.double().sum(1).cpu(), rtol=RTOL[dtype], atol=1e-3)
    assert torch.equal(maxima, a.amax(1))
    assert torch.equal(row_max(-a - 1, SMALL), (-a - 1).amax(1))


def test_rows_of_a_strided_view_and_of_minus_infinity(torch_device):
    a = _data(torch_device, (6, 300), torch.float32)[::2, :250]  # not contiguous: the host function copies it
    torch.testing.assert_close(row_sums(a, SMALL), a.sum(1), rtol=1e-5, atol=1e-4)
    b = torch.full((2, 200), float("-inf"), device=torch_device)
    b[1, 199] = 3.0
    assert row_max(b).tolist() == [float("-inf"), 3.0]


def test_empty_matrices(torch_device):
    assert row_sums(torch.zeros(3, 0, device=torch_device)).tolist() == [0, 0, 0]
    assert row_sums(torch.zeros(0, 5, device=torch_device)).shape == (0,)
    assert row_max(torch.zeros(0, 5, device=torch_device)).shape == (0,)
    with pytest.raises(ValueError, match="at least one column"):
        row_max(torch.zeros(3, 0, device=torch_device))


@pytest.mark.parametrize("function, arg, message", [
    (vector_sum, [1.0, 2.0], "x must be a torch.Tensor"),
    (vector_sum, torch.zeros(2, 2), "x must be a 1-D tensor"),
    (vector_max, torch.zeros(3, dtype=torch.int32), "x must have dtype float32"),
    (row_sums, torch.zeros(3), "a must be a 2-D tensor"),
    (row_max, torch.zeros(2, 2, dtype=torch.float64), "a must have dtype"),
])
def test_reduction_rejects_what_it_cannot_do(function, arg, message, torch_device):
    if isinstance(arg, torch.Tensor):
        arg = arg.to(torch_device)
    with pytest.raises(ValueError, match=message):
        function(arg)


def test_config_is_checked():
    with pytest.raises(ValueError, match="power of two"):
        Config(block=100, num_warps=4, programs_per_sm=1)
    with pytest.raises(ValueError, match="num_warps"):
        Config(block=128, num_warps=0, programs_per_sm=1)


def test_offsets_stay_32_bit(torch_device):
    with pytest.raises(ValueError, match="at most"):
        reduction._reduce(torch.zeros(1, device=torch_device).expand(reduction.MAX_ELEMENTS + 1), False, None)
