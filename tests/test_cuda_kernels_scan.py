"""The scan reference: inclusive like np.cumsum, in the input's dtype, across blocks, race-free and O(n) in requests."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.scan import SECTION, block_scan, scan


@pytest.mark.parametrize("n", [1, 31, 32, 33, SECTION - 1, SECTION, SECTION + 1, 1000])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_scan_is_exact_on_integers(n, dtype):
    x = np.random.default_rng(n).integers(-1000, 1000, n).astype(dtype)
    out = scan(x)
    assert out.dtype == dtype
    assert (out == np.cumsum(x, dtype=dtype)).all()


def test_scan_of_many_blocks_recurses_on_the_block_totals():
    x = np.ones(SECTION * SECTION + 3, np.int32)  # 257 blocks: their totals take two blocks, and those one more
    with simt.profile() as launches:
        out = scan(x)
    assert (out == np.arange(1, x.size + 1)).all()
    assert [launch["grid"][0] for launch in launches if launch["kernel"] == "block_scan_kernel"] == [257, 2, 1]


def test_int32_wraps_like_cuda_and_int64_does_not():
    x = np.full(3, 2**30, np.int32)
    assert (scan(x) == np.cumsum(x, dtype=np.int32)).all()  # 2**31 wraps to -2**31
    assert scan(x.astype(np.int64))[-1] == 3 * 2**30


def test_float32_scan_is_close_to_the_exact_sum():
    x = np.random.default_rng(0).uniform(-1, 1, 5000).astype(np.float32)
    exact = np.cumsum(x.astype(np.float64))
    assert np.abs(scan(x) - exact).max() < 1e-4


def test_block_scan_restarts_at_every_block():
    x = np.ones(2 * SECTION + 5, np.int64)
    out = block_scan(x)
    assert (out[:SECTION] == np.arange(1, SECTION + 1)).all()
    assert (out[2 * SECTION:] == np.arange(1, 6)).all()


def test_empty_input_gives_empty_output():
    assert scan(np.zeros(0, np.float32)).shape == (0,)
    assert block_scan(np.zeros(0, np.int32)).shape == (0,)


@pytest.mark.parametrize("x", [np.zeros(4, np.float64), np.zeros((2, 2), np.int32), np.zeros(3, np.uint8)])
def test_scan_rejects_what_it_cannot_do(x):
    with pytest.raises(ValueError, match="x must be"):
        scan(x)


def test_block_scan_is_race_free_and_its_sweeps_leave_warps_idle():
    with simt.profile() as launches:
        block_scan(np.zeros(1000, np.int32))  # a partial last block
        block_scan(np.zeros(4 * SECTION, np.int32))
    ragged, report = [launch.to_plain() for launch in launches]
    assert ragged["errors"] == report["errors"] == []
    # 4 blocks of 4 warps: 2 loads and 2 stores each, plus 12 up-sweep and 11 down-sweep warp
    # steps per block of 3 requests each (Hillis-Steele would need 8 levels x 4 warps x 2 x 3).
    assert report["shared"]["requests"] == 4 * (4 * 4 + 3 * (12 + 11) + 1)
