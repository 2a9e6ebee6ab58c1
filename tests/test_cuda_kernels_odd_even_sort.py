"""The odd-even transposition sort reference: any n up to a block, exactly np.sort, one launch, no errors."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.odd_even_sort import odd_even_sort


@pytest.mark.parametrize("n", [1, 2, 3, 13, 32, 45])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_odd_even_sort_matches_np_sort_in_one_launch(n, dtype):
    x = (np.random.default_rng(n).standard_normal(n) * 100).astype(dtype)
    with simt.profile() as launches:
        out = odd_even_sort(x)
    assert out.dtype == dtype and (out == np.sort(x)).all()
    assert len(launches) == 1 and launches[0]["errors"] == []


@pytest.mark.parametrize("n", [3, 4, 17])
def test_reversed_input_and_the_largest_values_sort(n):
    x = np.concatenate([[np.inf, np.finfo(np.float32).max], np.arange(n, 0, -1)]).astype(np.float32)
    assert (odd_even_sort(x) == np.sort(x)).all()


@pytest.mark.parametrize("x", [np.zeros(0, np.float32), np.zeros(1025, np.float32), np.zeros(4, np.float64),
                               np.zeros((2, 2), np.float32)])
def test_odd_even_sort_rejects_what_one_block_cannot_sort(x):
    with pytest.raises(ValueError, match="x must"):
        odd_even_sort(x)
