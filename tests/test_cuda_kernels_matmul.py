"""The tiled matmul reference: a @ b in float32 for any shape, race-free, loading what tiles load."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.matmul import TILE, matmul
from aisys.gemm_tiling import tile_reads


@pytest.mark.parametrize("shape", [(1, 1, 1), (9, 1, 9), (13, 19, 11), (16, 16, 8)])
def test_matmul_matches_numpy_on_ragged_tiles_without_errors(shape):
    M, K, N = shape
    rng = np.random.default_rng(M * K * N)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    with simt.profile() as launches:
        c = matmul(a, b)
    assert c.dtype == np.float32 and np.allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert len(launches) == 1 and launches[0]["errors"] == []


def test_each_element_is_loaded_once_per_tile():
    M, K, N = 16, 32, 32
    with simt.profile() as launches:
        matmul(np.ones((M, K), np.float32), np.ones((K, N), np.float32))
    loads = sum(line["requests"] for line in launches[0]["lines"]
                if line["space"] == "global" and line["kind"] == "load")
    assert 32 * loads == tile_reads(M, N, K, TILE, TILE)  # whole warps: 32 elements per load instruction


@pytest.mark.parametrize("a, b", [(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)),
                                  (np.zeros((2, 3), np.float64), np.zeros((3, 2), np.float32))])
def test_matmul_rejects_what_it_cannot_do(a, b):
    with pytest.raises(ValueError, match="must be"):
        matmul(a, b)
