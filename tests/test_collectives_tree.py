"""aisys.collectives.tree on real processes: results equal dist.all_reduce's, traffic as the formulas say, clear errors.

Few process groups, many cases in each: starting one costs ~0.05 s, and this machine has 2 cores.
"""

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from aisys.collectives import cost, traffic, tree
from aisys.collectives.launch import RanksFailed, run_ranks

SUM, MAX, MIN, PRODUCT = dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT
FUNCTIONS = {"recursive_doubling": tree.recursive_doubling_all_reduce,
             "halving_doubling": tree.halving_doubling_all_reduce,
             "tree": tree.tree_all_reduce,
             "tree_chunked": lambda t, op=SUM: tree.tree_all_reduce(t, op, chunks=3)}
LENGTHS = (0, 1, 13)  # empty, one element, a prime (segments of unequal length)


def _inputs(rank: int, n: int, dtype) -> torch.Tensor:
    return ((torch.arange(n) * 7 + rank * 3) % 11 - 5).to(dtype)  # small integers: sums and products exact


def _every_case(name: str, cases: list) -> list:
    """On one rank: (mine, dist.all_reduce's, messages as tuples) for each (n, dtype, op)."""
    out = []
    for n, dtype, op in cases:
        mine, expected = _inputs(dist.get_rank(), n, dtype), _inputs(dist.get_rank(), n, dtype)
        with traffic.record(allow_collectives=True) as log:
            returned = FUNCTIONS[name](mine, op=op)
        assert returned is mine
        dist.all_reduce(expected, op)
        out.append((mine, expected, [(m.kind, m.peer, m.numel) for m in log.messages]))
    return out


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("p", range(1, 8))
def test_equal_to_dist_all_reduce(name, p):
    cases = [(n, torch.int64, SUM) for n in LENGTHS] + [(5, torch.float32, SUM), (6, torch.int32, MAX),
                                                        (4, torch.float64, MIN), (3, torch.int64, PRODUCT)]
    for rank_results in run_ranks(_every_case, p, [(name, cases)] * p):
        for (mine, expected, _), case in zip(rank_results, cases):
            assert torch.equal(mine, expected), (p, case)


# --------------------------------------------------------------------------------------- traffic


def _rd_expected(rank: int, p: int, n: int) -> list:
    """Recursive doubling with the fold of Thakur et al.: the messages of `rank`, in order."""
    p2 = 1 << (p.bit_length() - 1)
    extra = p - p2
    if rank < 2 * extra and rank % 2 == 0:
        return [("send", rank + 1, n), ("recv", rank + 1, n)]
    survivors = [r for r in range(p) if r >= 2 * extra or r % 2 == 1]
    me = survivors.index(rank)
    rounds = [m for k in range(p2.bit_length() - 1)
              for m in (("send", survivors[me ^ 1 << k], n), ("recv", survivors[me ^ 1 << k], n))]
    if rank < 2 * extra:
        return [("recv", rank - 1, n)] + rounds + [("send", rank - 1, n)]
    return rounds


@pytest.mark.parametrize("p", range(1, 9))
def test_recursive_doubling_traffic(p):
    n = 10
    for rank, results in enumerate(run_ranks(_every_case, p, [("recursive_doubling", [(n, torch.int64, SUM)])] * p)):
        assert results[0][2] == _rd_expected(rank, p, n)


@pytest.mark.parametrize("p", [2, 4, 8, 3, 6])
def test_halving_doubling_traffic(p):
    n = 24  # a multiple of p': every segment the same size
    p2 = 1 << (p.bit_length() - 1)
    log_p, extra = p2.bit_length() - 1, p - p2
    survivors = [r for r in range(p) if r >= 2 * extra or r % 2 == 1]
    results = run_ranks(_every_case, p, [("halving_doubling", [(n, torch.int64, SUM)])] * p)
    for rank, (result,) in enumerate(results):
        messages = result[2]
        if rank < 2 * extra:  # the fold: the whole vector in, and the result out
            partner = rank + 1 if rank % 2 == 0 else rank - 1
            ends = [messages[0], messages[-1]]
            assert ends == ([("send", partner, n), ("recv", partner, n)] if rank % 2 == 0 else
                            [("recv", partner, n), ("send", partner, n)])
            messages = messages[1:-1]
        if rank not in survivors:
            assert not messages
            continue
        me = survivors.index(rank)
        distances = [1 << k for k in range(log_p)] + [1 << k for k in reversed(range(log_p))]
        sizes = [n >> (k + 1) for k in range(log_p)] + [n >> (k + 1) for k in reversed(range(log_p))]
        assert messages == [m for d, s in zip(distances, sizes)
                            for m in (("send", survivors[me ^ d], s), ("recv", survivors[me ^ d], s))]
        assert sum(s for s in sizes) == 2 * (p2 - 1) * n // p2  # the ring's volume, in 2 log2 p' rounds


@pytest.mark.parametrize("p", range(1, 8))
@pytest.mark.parametrize("chunks", [1, 3])
def test_binomial_tree_traffic(p, chunks):
    n, rounds = 9, math.ceil(math.log2(p))
    name = "tree" if chunks == 1 else "tree_chunked"
    results = run_ranks(_every_case, p, [(name, [(n, torch.int64, SUM)])] * p)
    messages = [r[0][2] for r in results]
    sends = [[m for m in mine if m[0] == "send"] for mine in messages]
    assert sum(map(len, sends)) == 2 * (p - 1) * chunks  # p - 1 edges, each used once up and once down per chunk
    assert len(messages[0]) == 2 * rounds * chunks if p > 1 else not messages[0]  # the root is in every round
    for rank in range(1, p):
        parent = rank - (rank & -rank)
        up = [m for m in sends[rank] if m[1] == parent]
        assert len(up) == chunks and sum(m[2] for m in up) == n  # sends its subtree's sum once, to its parent
        assert len(sends[rank]) <= (rounds + 1) * chunks


# --------------------------------------------------------------------------------------- bad input


def _call(name, tensor, **kw):
    return FUNCTIONS[name](tensor, **kw)


@pytest.mark.parametrize("name", ["recursive_doubling", "halving_doubling", "tree"])
def test_different_sizes_raise_on_every_rank(name):
    with pytest.raises(RanksFailed) as failed:
        run_ranks(_call, 3, [(name, torch.ones(4)), (name, torch.ones(5)), (name, torch.ones(4))], timeout=2)
    assert all(o.status == "raised" and "tensor must have the same number of elements on every rank" in o.error
               for o in failed.value.outcomes)


def test_different_dtypes_or_ops_raise_on_every_rank():
    with pytest.raises(RanksFailed) as failed:
        run_ranks(_call, 2, [("tree", torch.ones(4)), ("tree", torch.ones(4, dtype=torch.float64))], timeout=2)
    assert all("the same dtype" in o.error for o in failed.value.outcomes)
    with pytest.raises(RanksFailed) as failed:
        run_ranks(lambda op: tree.tree_all_reduce(torch.ones(2), op=op), 2, [(SUM,), (MAX,)], timeout=2)
    assert all("op must be the same on every rank" in o.error for o in failed.value.outcomes)


def _bad_input_errors() -> list:
    """On one rank: the error each bad call raises, before any message is posted."""
    bad = [(tree.recursive_doubling_all_reduce, (torch.ones(4, 3).t(),), {}),
           (tree.halving_doubling_all_reduce, (torch.ones(3),), {"op": dist.ReduceOp.AVG}),
           (tree.tree_all_reduce, ([1.0, 2.0],), {}),
           (tree.tree_all_reduce, (torch.ones(3, dtype=torch.complex64),), {}),
           (tree.tree_all_reduce, (torch.ones(3),), {"chunks": 0}),
           (tree.all_reduce, (torch.ones(3),), {"algorithm": "butterfly"}),
           (tree.all_reduce, (torch.ones(3),), {})]
    errors = []
    for function, args, kwargs in bad:
        try:
            function(*args, **kwargs)
            errors.append(None)
        except (TypeError, ValueError) as error:
            errors.append(f"{type(error).__name__}: {error}")
    return errors


def test_bad_input_names_the_argument():
    errors = run_ranks(_bad_input_errors, 2)[0]
    expected = ["ValueError: tensor must be contiguous", "ValueError: op must be one of dist.ReduceOp.SUM",
                "TypeError: tensor must be a",
                "TypeError: tensor must have one of the dtypes", "ValueError: chunks must be an integer >= 1",
                "ValueError: algorithm must be one of", "ValueError: algorithm 'auto' needs alpha"]
    for error, start in zip(errors, expected, strict=True):
        assert error and error.startswith(start), (error, start)


def _auto(n: int):
    tensor = torch.ones(n)
    with traffic.record(allow_collectives=True) as log:
        tree.all_reduce(tensor, "auto", alpha=1e-6, beta=1e-9)
    return tensor, len(log.messages)


def test_auto_dispatches_by_size():
    small, large = 1, 4096  # floats: 4 B is latency-bound, 16 KiB bandwidth-bound for these α, β
    assert tree.choose_algorithm(4 * small, 4, 1e-6, 1e-9) == "recursive_doubling"
    assert tree.choose_algorithm(4 * large, 4, 1e-6, 1e-9) == "halving_doubling"
    for n, messages in ((small, 2 * 2), (large, 2 * 2 * 2)):  # a send and a recv per round: log2 p or 2 log2 p rounds
        tensor, count = run_ranks(_auto, 4, [(n,)] * 4)[0]
        assert torch.equal(tensor, torch.full((n,), 4.0)) and count == messages


# --------------------------------------------------------------------------------------- choice by size


def test_choice_over_all_algorithms():
    alpha, beta = 5e-6, 1 / 50e9
    assert tree.choose_algorithm(8, 8, alpha, beta) == "recursive_doubling"  # latency-bound: fewest steps
    assert tree.choose_algorithm(1 << 30, 8, alpha, beta) == "halving_doubling"  # the ring's bytes, lg p steps
    assert tree.choose_algorithm(1 << 30, 6, alpha, beta) == "ring"  # the fold costs halving-doubling 2nβ more
    assert tree.choose_algorithm(1 << 20, 1, alpha, beta) == "ring"  # p = 1: every time is 0, a tie


@pytest.mark.parametrize("p", [3, 4, 5, 8, 16, 64, 100])
def test_ring_and_recursive_doubling_cross_where_the_cost_model_says(p):
    alpha, beta, pair = 5e-6, 1 / 50e9, ("ring", "recursive_doubling")
    n = cost.crossover("all_reduce", "ring", "recursive_doubling", p, alpha, beta)
    assert tree.choose_algorithm(n * 0.99, p, alpha, beta, pair) == "recursive_doubling"
    assert tree.choose_algorithm(n * 1.01, p, alpha, beta, pair) == "ring"


def test_a_tie_goes_to_the_first_listed():
    ring = cost.time("all_reduce", "ring", 64, 4, 4.0, 0.5)
    assert ring == cost.time("all_reduce", "recursive_doubling", 64, 4, 4.0, 0.5)
    assert tree.choose_algorithm(64, 4, 4.0, 0.5, ("ring", "recursive_doubling")) == "ring"
    assert tree.choose_algorithm(64, 4, 4.0, 0.5, ("recursive_doubling", "ring")) == "recursive_doubling"


@pytest.mark.parametrize("call, message", [
    (lambda: tree.choose_algorithm(8, 4, 1.0, 1.0, ()), "candidates must be a non-empty tuple"),
    (lambda: tree.choose_algorithm(8, 4, 1.0, 1.0, ("ring", "fast")), "algorithm must be one of"),
    (lambda: tree.choose_algorithm(-1, 4, 1.0, 1.0), "nbytes must be a number >= 0"),
    (lambda: tree.choose_algorithm(8, 0, 1.0, 1.0), "world_size must be an integer >= 1"),
    (lambda: tree.choose_algorithm(8, 4, -1.0, 1.0), "alpha must be a number >= 0"),
    (lambda: tree.recursive_doubling_peers(4, 4), "rank must be an integer in"),
])
def test_choice_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_recursive_doubling_peers():
    assert tree.recursive_doubling_peers(0, 6) == ([1], [1])
    assert tree.recursive_doubling_peers(1, 6) == ([3, 4, 0], [0, 3, 4])  # survivors 1, 3, 4, 5
    assert tree.recursive_doubling_peers(5, 6) == ([4, 3], [4, 3])
    assert tree.recursive_doubling_peers(0, 1) == ([], [])


# ------------------------------------------------------------------------------- rounds (for the book's figures)


def test_rounds_of_recorded_runs():
    from aisys.collectives import rounds

    doubling = rounds.assign(rounds.record(tree.recursive_doubling_all_reduce, 8, numel=4))
    assert [sorted(r) for r in doubling] == [sorted((s, s ^ 1 << k, 4) for s in range(8)) for k in range(3)]
    binomial = rounds.assign(rounds.record(tree.tree_all_reduce, 8, numel=4))
    assert [len(r) for r in binomial] == [4, 2, 1, 1, 2, 4]  # up the tree, then down, rank 0 to 4 first


def test_rounds_reject_an_unmatched_receive():
    from aisys.collectives import rounds

    with pytest.raises(ValueError, match="rank 1 posted a receive from rank 0 that no send matches"):
        rounds.assign([[], [("recv", 0, 3)]])
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        rounds.record(tree.tree_all_reduce, 0)


# --------------------------------------------------------------------------------------------- the check's words


class OneRoundShortStudent:
    """tree_all_reduce a round short: every rank ends with the sum over the first 2^(ceil(log2 p) - 1) ranks."""

    def call_ranks(self, function, cases, *, world_size, **_):
        half = 1 << max(math.ceil(math.log2(world_size)) - 1, 0)
        return [[{"value": None, "tensors": [np.sum([args[0] for args in case[:half]], axis=0, dtype=case[0][0].dtype)],
                  "messages": [], "error": None} for _ in case] for case in cases]


def test_a_partial_sum_over_2_to_the_k_ranks_is_said_to_be_a_round_short():
    from aisys_grader import checks_for, run

    result = run(checks_for("06-collectives/tree_allreduce")["tree_all_reduce"], OneRoundShortStudent(), hidden=False)
    assert "element 0 holds the data of ranks [0, 1] only, not of [2, 3]: 2 = 2^1 of the 4 ranks, what 1 round of " \
           "messages gather, where ceil(log2 p) = 2 are needed: does the loop stop a round short?" in result.message
