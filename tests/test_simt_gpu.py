"""The same kernel sources on a real GPU through numba-cuda: results must equal the simulator's.

Skipped (never passed) without an NVIDIA GPU and numba-cuda.
"""

import numpy as np
import pytest

from aisys import simt
from aisys.simt import cuda

import test_simt as k

pytestmark = pytest.mark.skipif(simt.backend() != "numba-cuda", reason="needs an NVIDIA GPU and numba-cuda")


def both(kernel, grid, block, *arrays_and_scalars):
    """Outputs of one launch on the GPU and in the simulator, from identical inputs."""
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays_and_scalars]
    sim = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays_and_scalars]
    kernel[grid, block](*gpu)
    cuda.synchronize()
    with simt.profile():
        kernel[grid, block](*sim)
    return [a for a in gpu if isinstance(a, np.ndarray)], [a for a in sim if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("case", [
    lambda: (k.copy, 4, 256, np.arange(1000, dtype=np.float32), np.zeros(1000, np.float32)),
    lambda: (k.grid_stride_add, 3, 64, np.arange(999, dtype=np.float32), np.ones(999, np.float32),
             np.zeros(999, np.float32)),
    lambda: (k.transpose_padded, 1, (32, 32), np.arange(1024, dtype=np.float32).reshape(32, 32),
             np.zeros((32, 32), np.float32)),
    lambda: (k.tree_sum, 4, k.BLOCK, np.arange(4 * k.BLOCK, dtype=np.int64), np.zeros(4, np.int64), True),
    lambda: (k.collectives, 1, 32, np.zeros((9, 32), np.int64)),
    lambda: (k.sum_with_device_function, 1, k.BLOCK, np.arange(k.BLOCK, dtype=np.float64), np.zeros(1)),
    lambda: (k.index_2d, (3, 4), (16, 16), np.zeros((37, 45), np.int64)),
    lambda: (k.swap_pairs, 1, 8, np.arange(9, dtype=np.int32)),
    lambda: (k.histogram, 2, 64, np.random.default_rng(0).integers(0, 8, 500).astype(np.int32),
             np.zeros(8, np.int64)),
], ids=["copy", "grid_stride_add", "transpose_padded", "tree_sum", "collectives", "device_function", "index_2d",
        "swap_pairs", "histogram"])
def test_gpu_and_simulator_agree(case):
    kernel, grid, block, *args = case()
    gpu, sim = both(kernel, grid, block, *args)
    for g, s in zip(gpu, sim):
        np.testing.assert_array_equal(g, s)
