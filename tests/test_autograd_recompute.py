"""aisys.autograd.recompute: the simulator against brute force and torch.utils.checkpoint, the planner against brute
force, Chen's rule, and argument checks."""

import numpy as np
import pytest

from aisys.autograd import recompute


def test_simulate_by_hand():
    a, c = [4, 1, 2, 8, 1], [1, 2, 3, 4, 5]
    everything = recompute.simulate(a, c, [0, 1, 2, 3, 4])
    assert (everything["peak"], everything["recompute"], everything["held"]) == (16, 0, 16)
    # segments 0..2 and 3..4: held 4 + 8; backward of 3..4 holds 4 + 8 + 1, of 0..2 holds 4 + 1 + 2
    two = recompute.simulate(a, c, [0, 3])
    assert (two["peak"], two["recompute"], two["held"]) == (13, 15, 12)
    assert two["steps"][-1] == ("backward 0", 0)
    assert [event for event, _ in two["steps"]][5:8] == ["recompute 3", "recompute 4", "backward 4"]
    # layer 0 is a checkpoint whether listed or not
    assert recompute.simulate(a, c, [3]) == two


def test_segments():
    assert recompute.segments(5, [0, 3]) == [(0, 2), (3, 4)]
    assert recompute.segments(3, []) == [(0, 2)]
    assert recompute.segments(3, [2, 1]) == [(0, 0), (1, 1), (2, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_all_plans_agree_with_the_simulator(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    a, c = rng.integers(0, 50, n).tolist(), rng.integers(0, 20, n).tolist()
    masks, peaks, recomputes = recompute.all_plans(a, c)
    assert masks.shape == (2 ** (n - 1), n) and masks[:, 0].all()
    for mask, peak, cost in zip(masks, peaks, recomputes):
        got = recompute.simulate(a, c, np.flatnonzero(mask).tolist())
        assert (got["peak"], got["recompute"]) == (peak, cost)


@pytest.mark.parametrize("seed", range(6))
def test_planner_is_optimal(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 13))
    a, c = rng.integers(1, 100, n).tolist(), rng.integers(0, 100, n).tolist()
    _, peaks, _ = recompute.all_plans(a, c)
    least = recompute.least_budget(a)
    assert least == peaks.min()
    for budget in (least, least + int(rng.integers(0, 100)), sum(a)):
        plan = recompute.plan_checkpoints(a, c, budget)
        got = recompute.simulate(a, c, plan)
        assert got["peak"] <= budget
        assert got["recompute"] == recompute.brute_force(a, c, budget)[0]
    assert recompute.plan_checkpoints(a, c, sum(a)) == list(range(n))


def test_planner_beats_the_sqrt_rule_on_uneven_layers():
    a = [1, 1, 1, 1, 1, 1, 1, 1, 1]
    c = [1, 1, 1, 1, 1, 1, 1, 1, 50]
    sqrt = recompute.simulate(a, c, recompute.sqrt_plan(9))
    best = recompute.plan_checkpoints(a, c, sqrt["peak"])
    assert recompute.simulate(a, c, best)["recompute"] < sqrt["recompute"]


def test_budget_below_the_least_is_refused():
    with pytest.raises(ValueError, match=r"budget 5 .* least feasible budget 6"):
        recompute.plan_checkpoints([2, 2, 2, 2], [1, 1, 1, 1], 5)


def test_sqrt_plan():
    assert recompute.sqrt_plan(16) == [0, 4, 8, 12]
    assert recompute.sqrt_plan(10) == [0, 4, 8]
    assert recompute.sqrt_plan(1) == [0]


def test_frontier_is_decreasing():
    points = recompute.frontier([3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8])
    peaks, costs = zip(*points)
    assert list(peaks) == sorted(peaks) and list(costs) == sorted(costs, reverse=True) and costs[-1] == 0


@pytest.mark.parametrize("plan", [None, [0], [0, 3], [0, 2, 4], [0, 1, 4], [0, 5]])
def test_torch_checkpoint_matches_the_simulator(plan):
    widths = [8, 16, 4, 32, 8, 8, 2]
    a = recompute.measure(widths)["a"]
    assert a == [4 * w * 8 for w in widths[:-1]]  # each Linear saves its float64 input of 4 rows
    c = recompute.chain_costs(widths, 4)
    measured = recompute.measure(widths, plan)
    predicted = recompute.simulate(a, c, list(range(6)) if plan is None else plan)
    assert (measured["peak"], measured["held"], measured["recompute"]) == (
        predicted["peak"], predicted["held"], predicted["recompute"])


@pytest.mark.parametrize("call, match", [
    (lambda: recompute.simulate([], [], [0]), "a must"),
    (lambda: recompute.simulate([1, 2], [1], [0]), "c must"),
    (lambda: recompute.simulate([1, 2], [1, 1], [2]), "plan must"),
    (lambda: recompute.simulate([1, 2], [1, 1], [1, 1]), "plan must"),
    (lambda: recompute.plan_checkpoints([1, 2], [1, 1], -1), "budget must"),
    (lambda: recompute.least_budget([1, -2]), r"a\[i\] must"),
])
def test_arguments_are_checked(call, match):
    with pytest.raises(ValueError, match=match):
        call()
