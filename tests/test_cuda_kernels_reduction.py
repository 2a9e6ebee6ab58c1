"""The reduction reference: block sums by a tree and by shuffles, a whole sum in two passes, and how each runs;
and what the exercise's checks read from a wrong result."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.reduction import BLOCK, MAX_BLOCKS, block_sums_shuffle, block_sums_tree, reduce_sum
from aisys_grader import InProcessStudent, checks_for, run

STAGES = [block_sums_tree, block_sums_shuffle]


def _block_sums(x):
    padded = np.zeros(-(-x.size // BLOCK) * BLOCK, x.dtype)
    padded[:x.size] = x
    return padded.reshape(-1, BLOCK).sum(axis=1, dtype=x.dtype)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("n", [1, 31, 32, 33, BLOCK - 1, BLOCK, BLOCK + 1, 1000])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_block_sums_are_exact_on_integers(stage, n, dtype):
    x = np.random.default_rng(n).integers(-2**20, 2**20, n).astype(dtype)
    out = stage(x)
    assert out.dtype == dtype and (out == _block_sums(x)).all()


@pytest.mark.parametrize("n", [1, 33, 1000, MAX_BLOCKS * BLOCK + 1, 2**16 + 7])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_sum_is_exact_on_integers(n, dtype):
    x = np.random.default_rng(n).integers(-2**20, 2**20, n).astype(dtype)
    total = reduce_sum(x)
    assert total.dtype == dtype and total == x.sum(dtype=dtype)


def test_int64_sums_keep_every_bit():
    x = np.full(300, 2**40 + 1, np.int64)  # a float64 or int32 accumulator would lose some
    assert (block_sums_tree(x) == [256 * (2**40 + 1), 44 * (2**40 + 1)]).all()
    assert reduce_sum(x) == 300 * (2**40 + 1)


def test_float32_sums_are_close_to_the_exact_sum():
    x = np.random.default_rng(0).random(5000, np.float32)
    exact = x.astype(np.float64)
    assert np.allclose(block_sums_shuffle(x), _block_sums(exact), rtol=1e-6)
    assert abs(reduce_sum(x) - exact.sum()) < 1e-6 * exact.sum()


def test_empty_input():
    assert block_sums_tree(np.zeros(0, np.float32)).shape == (0,)
    assert block_sums_shuffle(np.zeros(0, np.int32)).shape == (0,)
    assert reduce_sum(np.zeros(0, np.int64)) == 0


@pytest.mark.parametrize("x", [np.zeros((2, 2), np.int32), np.zeros(3, np.uint8), np.zeros(3, np.float16)])
def test_reduction_rejects_what_it_cannot_do(x):
    for function in (block_sums_tree, block_sums_shuffle, reduce_sum):
        with pytest.raises(ValueError, match="x must be"):
            function(x)


def test_sequential_addressing_diverges_only_in_the_last_warp_and_has_no_bank_conflicts():
    with simt.profile() as launches:
        block_sums_tree(np.ones(4 * BLOCK, np.float32))
    report = launches[-1]
    assert report["errors"] == [] and report["shared"]["bank_conflicts"] == 0
    assert report["global"]["efficiency"] == 1.0
    # Per block: warp 0 diverges at s = 16, 8, 4, 2, 1 and at `if tid == 0`; nothing else does.
    assert report["branches"]["divergent"] == 4 * 6


def test_shuffles_replace_the_last_five_levels_of_shared_memory():
    x = np.ones(4 * BLOCK, np.float32)
    with simt.profile() as launches:
        block_sums_tree(x)
        block_sums_shuffle(x)
    tree, shuffle = launches
    assert shuffle["errors"] == []
    # Per block: 8 warps store; levels 128, 64, 32 take 4, 2, 1 warps of 3 requests; then the tree
    # takes 5 levels of 1 warp (3 requests) and one load of sdata[0], the shuffles one load of sdata[tid].
    assert tree["shared"]["requests"] == 4 * (8 + 3 * 7 + 3 * 5 + 1)
    assert shuffle["shared"]["requests"] == 4 * (8 + 3 * 7 + 1)


def test_reduce_sum_takes_two_launches_of_many_blocks_then_one():
    with simt.profile() as launches:
        assert reduce_sum(np.ones(2**14 + 3, np.int32)) == 2**14 + 3
    assert [launch["grid"][0] for launch in launches] == [MAX_BLOCKS, 1]
    assert all(launch["errors"] == [] and launch["global"]["efficiency"] == 1.0 for launch in launches)


# The checks' hints: what a wrong result shows, recognised from the result (students made of numpy) --------------

def _graded(check: str, **functions) -> str:
    result = run(checks_for("02-gpu-programming/reduction")[check], InProcessStudent(functions), hidden=True, seed=1)
    assert result.failed
    return result.message


def _sums_of(part):
    """Block sums of only `part` of each block (x[::2] or x[:BLOCK // 2] of each), in x's dtype."""
    def block_sums(x):
        padded = np.zeros(-(-x.size // BLOCK) * BLOCK, x.dtype)
        padded[:x.size] = x
        return part(padded.reshape(-1, BLOCK)).sum(axis=1, dtype=x.dtype)
    return block_sums


@pytest.mark.parametrize("part, said", [(lambda b: b[:, ::2], "stopped one level short"),
                                        (lambda b: b[:, :BLOCK // 2], "started one level short")])
def test_a_tree_one_level_short_is_named(part, said):
    assert said in _graded("block_sums_tree", block_sums_tree=_sums_of(part))
    assert said in _graded("block_sums_shuffle", block_sums_shuffle=_sums_of(part))


def test_integer_sums_rounded_through_float32_are_named():
    def through_float32(x):
        return _block_sums(x.astype(np.float32).astype(np.float64)).astype(np.float32).astype(x.dtype)
    assert "rounded, as float32" in _graded("block_sums_tree", block_sums_tree=through_float32)


@pytest.mark.parametrize("total, said", [
    (lambda x: 2 * x.sum(dtype=x.dtype), "added more than once"),
    (lambda x: x[::2].sum(dtype=x.dtype), "never added"),
    (lambda x: np.cumsum(x, dtype=x.dtype)[-1] if x.size else x.dtype.type(0), "drifted")])  # one by one
def test_what_a_wrong_sum_of_equal_values_shows_is_named(total, said):
    assert said in _graded("reduce_sum", reduce_sum=total)
