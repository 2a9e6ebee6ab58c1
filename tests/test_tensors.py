"""aisys.tensors: numpy to tensors on aisys's device and back, by the exercises' format names."""

import numpy as np
import pytest
import torch

from aisys.tensors import TORCH_DTYPES, to_device, to_numpy


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_round_trip_keeps_values_and_shape(dtype, torch_device):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 8  # exact in every format
    t = to_device(x, dtype)
    assert t.dtype == TORCH_DTYPES[dtype] and t.shape == (3, 4) and t.is_contiguous()
    assert t.device.type == torch_device
    back = to_numpy(t)
    assert back.dtype == {"fp32": np.float32, "fp16": np.float16, "bf16": np.float32}[dtype]  # numpy has no bf16
    np.testing.assert_array_equal(back, x)


def test_a_load_past_the_end_finds_the_largest_number():
    t = to_device(np.zeros(5, np.float32), "fp16")
    past = torch.as_strided(t, (8,), (1,))  # what a kernel without a mask reads
    assert (past[5:] == torch.finfo(torch.float16).max).all()


def test_an_unknown_format_is_named():
    with pytest.raises(ValueError, match="dtype must be one of 'fp32', 'fp16', 'bf16'; got 'fp64'"):
        to_device(np.zeros(2), "fp64")
