"""The matrix-vector references: A x and x A in float32 for any shape; only x A reads a row-major A coalesced."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.gemv import gemv, gemv_t


@pytest.mark.parametrize("shape", [(1, 1), (1, 37), (37, 1), (129, 5), (5, 129)])
def test_gemv_and_gemv_t_match_numpy(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    x, v = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[0]).astype(np.float32)
    assert gemv(a, x).dtype == np.float32 and np.allclose(gemv(a, x), a.astype(np.float64) @ x, atol=1e-4)
    assert gemv_t(a, v).dtype == np.float32 and np.allclose(gemv_t(a, v), v.astype(np.float64) @ a, atol=1e-4)


def test_one_thread_per_column_coalesces_and_one_per_row_does_not():
    a = np.ones((64, 96), np.float32)
    with simt.profile() as launches:
        gemv(a, np.ones(96, np.float32))
        gemv_t(a, np.ones(64, np.float32))
    rows, columns = (launch["global"]["efficiency"] for launch in launches)
    assert columns == 1.0 and rows < 0.2


@pytest.mark.parametrize("a, x", [(np.zeros((2, 3), np.float32), np.zeros(2, np.float32)),
                                  (np.zeros((2, 3), np.float64), np.zeros(3, np.float32)),
                                  (np.zeros((0, 3), np.float32), np.zeros(3, np.float32))])
def test_gemv_rejects_what_it_cannot_do(a, x):
    with pytest.raises(ValueError, match="must be"):
        gemv(a, x)
