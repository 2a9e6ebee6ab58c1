"""The vector_add reference: exact sums of any length from a fixed grid, coalesced, without a launch for n = 0; and
what the exercise's check reads from a wrong result."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.vector_add import MAX_BLOCKS, THREADS, vector_add
from aisys_grader import InProcessStudent, checks_for, run


@pytest.mark.parametrize("n", [1, 31, 33, THREADS, MAX_BLOCKS * THREADS, MAX_BLOCKS * THREADS + 1, 5000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_vector_add_is_exact(n, dtype):
    rng = np.random.default_rng(n)
    x, y = (rng.integers(-1000, 1000, n).astype(dtype) for _ in range(2))
    out = vector_add(x, y)
    assert out.dtype == dtype and (out == x + y).all()


def test_empty_input_launches_nothing():
    with simt.profile() as launches:
        assert vector_add(np.zeros(0, np.float32), np.zeros(0, np.float32)).shape == (0,)
    assert launches == []


def test_the_grid_is_fixed_and_every_access_coalesced():
    x = np.ones(5000, np.float32)
    with simt.profile() as launches:
        vector_add(x, x)
        vector_add(x[:100], x[:100])
    large, small = launches
    assert large["grid"] == [MAX_BLOCKS, 1, 1] and large["threads"] < 5000  # each thread takes about ten steps
    assert small["grid"] == [1, 1, 1]  # no block without work
    assert large["global"]["efficiency"] == 1.0
    assert large["global"]["ideal_sectors"] == 3 * 5000 * 4 // 32  # x and y read once, out written once
    assert large["errors"] == []


@pytest.mark.parametrize("x, y", [(np.zeros(3, np.float32), np.zeros(4, np.float32)),
                                  (np.zeros(3, np.float32), np.zeros(3, np.int32)),
                                  (np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int32)),
                                  (np.zeros(3, np.uint8), np.zeros(3, np.uint8))])
def test_vector_add_rejects_what_it_cannot_do(x, y):
    with pytest.raises(ValueError, match="x and y must be"):
        vector_add(x, y)


@pytest.mark.parametrize("add, said", [
    (lambda x, y: np.where(np.arange(x.size) % 512 < 128, x + y, 0).astype(x.dtype), "only the first block"),
    (lambda x, y: np.where(np.arange(x.size) < 512, x + y, 0).astype(x.dtype), "stopped before the end"),
    (lambda x, y: (x + y).astype(np.float64), "keeps the dtype")])
def test_the_vector_add_check_says_what_wrong_elements_show(add, said):
    result = run(checks_for("02-gpu-programming/vector_add")["vector_add"], InProcessStudent({"vector_add": add}),
                 hidden=True, seed=1)
    assert result.failed and said in result.message
