"""The bitonic sort reference: sorts any length exactly, pads with the dtype's largest value, one launch per stage."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.bitonic_sort import bitonic_sort, bitonic_sort_block, padding_value, stages


@pytest.mark.parametrize("n", [0, 1, 2, 3, 31, 32, 33, 100])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_bitonic_sort_matches_np_sort(n, dtype):
    x = (np.random.default_rng(n).standard_normal(n) * 100).astype(dtype)
    out = bitonic_sort(x)
    assert out.dtype == dtype
    assert (out == np.sort(x)).all()


def test_extreme_values_and_infinities_sort_before_the_padding():
    x = np.array([np.inf, -np.inf, 3.0, np.finfo(np.float32).max], np.float32)[[0, 1, 2, 3, 2]]
    assert (bitonic_sort(x) == np.sort(x)).all()
    y = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min, 0], np.int32)
    assert (bitonic_sort(y) == np.sort(y)).all()


def test_padding_sorts_last():
    assert padding_value(np.float32) == np.inf
    assert padding_value(np.int32) == 2**31 - 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 100, 128])
def test_one_launch_per_stage_of_the_padded_network(n):
    with simt.profile() as launches:
        bitonic_sort(np.zeros(n, np.float32))
    assert len(launches) == stages(n)
    assert all(launch["errors"] == [] for launch in launches)
    assert [stages(n) for n in (1, 2, 3, 4, 5, 128)] == [0, 1, 3, 3, 6, 28]


@pytest.mark.parametrize("x", [np.zeros(4, np.float64), np.zeros((2, 2), np.int32)])
def test_bitonic_sort_rejects_what_it_cannot_do(x):
    with pytest.raises(ValueError, match="x must be"):
        bitonic_sort(x)


@pytest.mark.parametrize("n", [1, 2, 4, 32, 128])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_one_block_sorts_in_one_launch_through_shared_memory(n, dtype):
    x = (np.random.default_rng(n).standard_normal(n) * 100).astype(dtype)
    with simt.profile() as launches:
        out = bitonic_sort_block(x)
    assert out.dtype == dtype and (out == np.sort(x)).all()
    assert len(launches) == 1 and launches[0]["errors"] == []
    assert launches[0]["global"]["requests"] == 2 * -(-n // 32)  # one load and one store per element


@pytest.mark.parametrize("n", [0, 3, 2048])
def test_one_block_rejects_what_one_block_cannot_sort(n):
    with pytest.raises(ValueError, match="power of two"):
        bitonic_sort_block(np.zeros(n, np.float32))
