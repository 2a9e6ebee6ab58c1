"""The dot product reference: x . y in float32 for any length, coalesced, two launches, no errors."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.dot import dot


@pytest.mark.parametrize("n", [0, 1, 255, 257, 513, 3000])
def test_dot_matches_the_float64_dot_product(n):
    rng = np.random.default_rng(n)
    x, y = rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
    out = dot(x, y)
    assert isinstance(out, np.float32)
    assert abs(float(out) - float(np.dot(x.astype(np.float64), y))) <= 1e-5 * float(np.abs(x * y).sum()) + 1e-30


def test_grid_stride_loads_are_coalesced_and_race_free():
    x = np.ones(2048, np.float32)
    with simt.profile() as launches:
        assert dot(x, x) == 2048
    assert len(launches) == 2 and all(launch["errors"] == [] for launch in launches)
    assert launches[0]["global"]["efficiency"] == 1.0


@pytest.mark.parametrize("x, y", [(np.zeros(3, np.float64), np.zeros(3, np.float32)),
                                  (np.zeros(3, np.float32), np.zeros(4, np.float32))])
def test_dot_rejects_what_it_cannot_do(x, y):
    with pytest.raises(ValueError, match="must be"):
        dot(x, y)
