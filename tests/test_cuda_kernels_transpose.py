"""The tiled transpose reference: exact on ragged shapes and both dtypes, coalesced, conflict-free, race-free."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.transpose import transpose


@pytest.mark.parametrize("shape", [(1, 1), (1, 37), (37, 1), (32, 32), (33, 65), (100, 31)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_transpose_is_exact(shape, dtype):
    a = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    out = transpose(a)
    assert out.dtype == dtype and out.shape == shape[::-1]
    assert (out == a.T).all()


def test_transpose_moves_float_bits_unchanged():
    a = np.array([[np.nan, -0.0, np.inf], [1e-45, -np.inf, 3.0]], np.float32)
    a[0, 0] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a NaN with a payload
    assert transpose(a).tobytes() == np.ascontiguousarray(a.T).tobytes()


def test_empty_matrices_give_empty_transposes():
    assert transpose(np.zeros((0, 5), np.float32)).shape == (5, 0)


@pytest.mark.parametrize("a", [np.zeros(4, np.float32), np.zeros((2, 2), np.float64), np.zeros((2, 2, 2), np.int32)])
def test_transpose_rejects_what_it_cannot_do(a):
    with pytest.raises(ValueError, match="a must be"):
        transpose(a)


def test_full_tiles_are_coalesced_and_conflict_free():
    with simt.profile() as launches:
        transpose(np.zeros((64, 96), np.float32))
    (report,) = [launch.to_plain() for launch in launches]
    assert report["global"]["efficiency"] == 1.0
    assert report["shared"]["bank_conflicts"] == 0
    assert report["errors"] == []


def test_ragged_tiles_have_no_race_or_barrier_error():
    with simt.profile() as launches:
        transpose(np.zeros((33, 65), np.int32))
    assert launches[-1].to_plain()["errors"] == []
