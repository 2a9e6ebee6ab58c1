"""The optimum checkpoint interval: Daly's published examples, the exact optimum of his model, and a simulation."""

import math

import pytest

from aisys.parallel import checkpointing as ck


@pytest.mark.parametrize("mtbf_minutes, published", [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_interval_matches_the_papers_examples(mtbf_minutes, published):
    """Daly (FGCS 2006), Figs. 3-5: a 5-minute dump, M = 24 h, 6 h, 15 min -> 117, 57 and 9.1 minutes."""
    assert ck.daly_interval(5, mtbf_minutes) == pytest.approx(published, abs=0.5 if published > 10 else 0.05)


def test_daly_is_closer_than_young_to_the_exact_optimum_and_both_agree_when_checkpoints_are_cheap():
    for cost, mtbf in [(5, 15), (5, 60), (1, 1000)]:
        exact = ck.optimal_interval(cost, mtbf)
        assert abs(ck.daly_interval(cost, mtbf) - exact) < abs(ck.young_interval(cost, mtbf) - exact)
    assert ck.young_interval(1, 1e6) == pytest.approx(ck.optimal_interval(1, 1e6), rel=2e-3)
    assert ck.daly_interval(10, 4) == 4  # a checkpoint dearer than 2M: Daly's rule checkpoints every M


def test_the_exact_optimum_minimises_the_expected_runtime():
    best = ck.optimal_interval(5, 60, restart=10)
    at = lambda tau: ck.expected_runtime(1000, tau, 5, 60, restart=10)  # noqa: E731
    assert at(best) < at(best * 0.9) and at(best) < at(best * 1.1)


def test_the_simulation_agrees_with_the_model():
    """2000 runs: the mean's standard error is about 1% here; 4% leaves room for four of them."""
    work, tau, cost, mtbf, restart = 600.0, 30.0, 5.0, 60.0, 10.0
    simulated = ck.simulate_runtime(work, tau, cost, mtbf, restart, runs=2000, seed=1).mean()
    assert simulated == pytest.approx(ck.expected_runtime(work, tau, cost, mtbf, restart), rel=0.04)


@pytest.mark.parametrize("call, message", [
    (lambda: ck.young_interval(0, 10), "cost must be a finite number > 0"),
    (lambda: ck.daly_interval(1, -1), "mtbf must be a finite number > 0"),
    (lambda: ck.expected_runtime(10, math.nan, 1, 1), "interval must be a finite number > 0"),
    (lambda: ck.simulate_runtime(10, 1, 1, 1, runs=0), "runs must be an integer >= 1"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
