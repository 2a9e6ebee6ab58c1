"""How often to checkpoint a training run that fails at random: Young's and Daly's optimum intervals, the expected
run time of Daly's model, and a simulation of it.

A run of `work` seconds of computation on a machine whose failures come as a Poisson process
with mean time between failures `mtbf` writes a checkpoint of `cost` seconds after every
`interval` seconds of computation. A failure loses the work since the last checkpoint and costs
`restart` seconds to resume. Checkpointing more often wastes time writing; less often wastes
time recomputing. The optimum balances the two:

- Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974:
  sqrt(2 * cost * mtbf), from a first-order expansion that assumes cost << mtbf.
- Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  Future Generation Computer Systems 22(3), 2006, eq. (37): the perturbation solution
  sqrt(2 c M) [1 + (1/3) sqrt(c / 2M) + (1/9) (c / 2M)] - c for c < 2M, else M, which stays
  close to the exact optimum of the complete model (eq. (13)) where Young's drifts.

Times are in any one unit (seconds, hours) used throughout.
"""

import math

import numpy as np

from .._validate import nonnegative_number, positive_int, positive_number


def young_interval(cost: float, mtbf: float) -> float:
    """Young's optimum: sqrt(2 * cost * mtbf) of computation between checkpoints."""
    cost, mtbf = positive_number("cost", cost), positive_number("mtbf", mtbf)
    return math.sqrt(2 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum (FGCS 2006, eq. 37): for cost < 2 mtbf,
    sqrt(2 c M) [1 + sqrt(c / 2M) / 3 + (c / 2M) / 9] - c; otherwise M."""
    cost, mtbf = positive_number("cost", cost), positive_number("mtbf", mtbf)
    if cost >= 2 * mtbf:
        return mtbf
    ratio = cost / (2 * mtbf)
    return math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost


def expected_runtime(work: float, interval: float, cost: float, mtbf: float, restart: float = 0.0) -> float:
    """The expected wall time of Daly's complete model (eq. 13): M e^(R/M) (e^((τ+c)/M) - 1) work / τ, each of the
    work / τ segments of τ computation plus a checkpoint of c being retried after each failure, R the restart."""
    work, interval = positive_number("work", work), positive_number("interval", interval)
    cost, mtbf = nonnegative_number("cost", cost), positive_number("mtbf", mtbf)
    restart = nonnegative_number("restart", restart)
    return mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf) * work / interval


def optimal_interval(cost: float, mtbf: float, restart: float = 0.0) -> float:
    """The interval that minimises `expected_runtime` exactly (it does not depend on the work or the restart):
    found by golden-section search on the convex (τ + c) -> e^((τ+c)/M) - 1 over τ."""
    cost, mtbf = positive_number("cost", cost), positive_number("mtbf", mtbf)
    nonnegative_number("restart", restart)
    low, high = 1e-9 * mtbf, 50 * mtbf
    golden = (math.sqrt(5) - 1) / 2
    a, b = high - golden * (high - low), low + golden * (high - low)
    slowdown = lambda tau: math.expm1((tau + cost) / mtbf) / tau  # noqa: E731
    for _ in range(200):
        if slowdown(a) < slowdown(b):
            high, b = b, a
            a = high - golden * (high - low)
        else:
            low, a = a, b
            b = low + golden * (high - low)
    return (low + high) / 2


def simulate_runtime(work: float, interval: float, cost: float, mtbf: float, restart: float = 0.0, *,
                     runs: int = 2000, seed: int = 0) -> np.ndarray:
    """Wall times of `runs` simulated runs: failures drawn from an exponential distribution (Poisson process), a
    failure during a segment or its checkpoint loses the segment, and the restart itself can fail (as in Daly's
    model). The mean of the result converges to `expected_runtime`."""
    work, interval = positive_number("work", work), positive_number("interval", interval)
    cost, mtbf = nonnegative_number("cost", cost), positive_number("mtbf", mtbf)
    restart, runs = nonnegative_number("restart", restart), positive_int("runs", runs)
    rng = np.random.default_rng(seed)
    segments = [interval] * int(work // interval) + ([work % interval] if work % interval > 1e-12 * work else [])
    times = np.empty(runs)
    for run in range(runs):
        clock = 0.0
        for segment in segments:
            needed, resuming = segment + cost, False
            while True:
                attempt = needed + (restart if resuming else 0.0)
                failure = rng.exponential(mtbf)
                if failure >= attempt:
                    clock += attempt
                    break
                clock += failure
                resuming = True
        times[run] = clock
    return times
