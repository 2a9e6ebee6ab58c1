"""Checks: the α-β cost of collectives, bus bandwidth, a fit of α and β, crossovers.

Every function is plain arithmetic, called through `student.call` and compared with the reference
(`aisys.collectives.cost`, `aisys.collectives.busbw`) on the same input. `predicted_time` is
taken apart first: called with (α, β) = (1, 0) it gives the latency term's count of messages,
with (0, 1) the bandwidth term's bytes, so a failure names the term that is wrong and the
formula it should follow. The fit is checked on timings the grader makes from a known α and β,
with noise that grows with the time (as real timings do) and, in rows of repeats, runs slowed
by 3 to 30 times: only the median over repeats followed by least squares in relative error
reproduces the reference. The last check runs the student's fit on the student's own
ping-pong measurement, so it depends on nothing about the machine's speed.

Hidden cases cover p = 1, powers of two and their neighbours (non-powers of two are where
⌈lg p⌉, ⌊lg p⌋ and the fold differ), p up to 64, buffers of 0, 1 byte and 1 GiB, each link of
`aisys.interconnect`, timings with an even number of repeats, with a size of 0 bytes, and with
only two sizes (an exact line), and pairs of algorithms whose lines never cross.
"""

import math

import numpy as np

# The answer key, kept out of the grading kernel. Imported module by module: `from aisys.collectives
# import cost` would hide the whole package, and with it the launcher the notebook measures with.
import aisys.collectives.busbw as busbw
import aisys.collectives.cost as cost
from aisys.interconnect import LINKS, NCCL_RING_STEP_LATENCY

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, unredacted

MiB, GiB = 2**20, 2**30

# α of one message: the per-step latency of NCCL's tuning model for a ring with the Simple protocol
# (aisys.interconnect); tens of µs for gloo over loopback TCP, as measured. β is 1 / the link's one-way bandwidth.
STEP = {link: latency["Simple"] for link, latency in NCCL_RING_STEP_LATENCY.items()}
NETWORKS = {
    "NVLink 4": (STEP["NVLink"], 1 / LINKS["NVLink 4 (H100/H200 SXM)"].bandwidth),
    "PCIe 5.0 x16": (STEP["PCIe"], 1 / LINKS["PCIe 5.0 x16"].bandwidth),
    "InfiniBand NDR": (STEP["network"], 1 / LINKS["InfiniBand NDR"].bandwidth),
    "loopback TCP": (40e-6, 1 / 3e9),
}
VISIBLE_SIZES = (4, 6)  # one power of two, one not
HIDDEN_SIZES = (1, 2, 3, 5, 7, 8, 9, 12, 16, 24, 31, 32, 33, 64)
PAIRS = [(c, a) for c, a in cost.FORMULAS]


# ----------------------------------------------------------------------------------------- predicted_time


def _student_terms(student, collective: str, algorithm: str, p: int) -> tuple[float, float]:
    """The student's latency count (time at α=1, β=0) and bytes per byte of buffer (time at α=0, β=1, n=1 MiB)."""
    common = {"collective": collective, "algorithm": algorithm, "world_size": p}
    latency = student.call("predicted_time", nbytes=MiB, alpha=1.0, beta=0.0, returns="number", **common)
    volume = student.call("predicted_time", nbytes=MiB, alpha=0.0, beta=1.0, returns="number", **common)
    return latency, volume / MiB


def _latency_hint(expected: float, got: float, p: int) -> str:
    if got != round(got):
        return (" A count of messages is a whole number: where p is not a power of two, lg p is not, so use "
                "⌈lg p⌉ (rounds of a tree or of Bruck's algorithm) or ⌊lg p⌋ plus the fold's 2 steps, as the table "
                "says.")
    if expected and got * 2 == expected:
        return (" That is half: this algorithm has two phases (reduce-scatter then all-gather, reduce then "
                "broadcast, or scatter then all-gather), and each costs its own messages.")
    if not cost.is_power_of_two(p):
        return " p is not a power of two here: check the rounding (⌈lg p⌉ or ⌊lg p⌋) and the fold's extra steps."
    return ""


def _volume_hint(expected: float, got: float, p: int) -> str:
    if math.isclose(got, 1.0) and not math.isclose(expected, 1.0):
        return (" You counted the whole buffer once: in the bandwidth-optimal algorithms each message carries "
                "a 1/p chunk, and the busiest link carries (p-1)/p of the buffer per phase.")
    if math.isclose(got * 2, expected):
        return " That is half: both phases move (p-1)/p of the buffer over each link."
    if not cost.is_power_of_two(p):
        return " p is not a power of two here: check the rounding and the fold, which moves the whole buffer twice."
    return ""


def _check_terms(student, collective: str, algorithm: str, p: int, label: str) -> None:
    latency, volume = cost.terms(collective, algorithm, 1, p)
    latency_text, volume_text = cost.formula(collective, algorithm)
    got_latency, got_volume = _student_terms(student, collective, algorithm, p)
    name = f"{algorithm} {collective} at p={p}"
    if not math.isclose(got_latency, latency, rel_tol=1e-9, abs_tol=1e-9):
        raise CheckFailure(f"{label}: latency term of {name}: expected {latency_text}"
                           + unredacted(f" = {latency:g} α, got {got_latency:g} α", " α; yours differs")
                           + " (predicted_time with alpha=1, beta=0)." + _latency_hint(latency, got_latency, p))
    if not math.isclose(got_volume, volume, rel_tol=1e-9, abs_tol=1e-12):
        raise CheckFailure(f"{label}: bandwidth term of {name}: expected {volume_text}"
                           + unredacted(f" = {volume:.6g} n β, got {got_volume:.6g} n β", " n β; yours differs")
                           + " (predicted_time with alpha=0, beta=1, divided by nbytes)."
                           + _volume_hint(volume, got_volume, p))


@check(points=3)
def predicted_time(student, rng, hidden):
    """predicted_time(collective, algorithm, nbytes, world_size, alpha, beta) follows the α-β table term by term."""
    sizes = HIDDEN_SIZES + tuple(int(p) for p in rng.integers(2, 65, size=3)) if hidden else VISIBLE_SIZES
    combinations = [(c, a, p) for c, a in PAIRS for p in sizes]
    for i, (collective, algorithm, p) in enumerate(combinations, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(combinations)}"
        _check_terms(student, collective, algorithm, p, label)
    # Whole times on real links, buffers from empty to 1 GiB: the terms must also add up.
    buffers = [0, 1, 4 * MiB, GiB] + ([int(10 ** rng.uniform(1, 9))] if hidden else [])
    cases = [{"collective": c, "algorithm": a, "nbytes": n, "world_size": p, "alpha": alpha, "beta": beta}
             for c, a in PAIRS for p in (5, 8) for n, (alpha, beta) in zip(buffers, NETWORKS.values())]
    compare_cases(student, "predicted_time", cases, cost.time, returns="number", hidden=hidden,
                  tolerance=(1e-9, 0))


# ----------------------------------------------------------------------------------------- bus bandwidth


@check(points=1)
def bus_bandwidth(student, rng, hidden):
    """bus_bandwidth(collective, nbytes, seconds, world_size) is nccl-tests' busbw: algbw times 2(p-1)/p, (p-1)/p
    or 1."""
    collectives = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    if hidden:
        cases = [{"collective": c, "nbytes": int(2 ** rng.uniform(0, 31)), "seconds": float(10 ** rng.uniform(-6, -1)),
                  "world_size": int(p)} for c in collectives for p in (1, 2, 3, *rng.integers(4, 65, size=2))]
    else:
        cases = [{"collective": c, "nbytes": GiB, "seconds": 5e-3, "world_size": 8} for c in collectives]
    compare_cases(student, "bus_bandwidth", cases, busbw.bus_bandwidth, returns="number", hidden=hidden,
                  tolerance=(1e-9, None))


# ----------------------------------------------------------------------------------------- fit


def synthetic_timings(rng, alpha: float, beta: float, sizes, repeats: int = 0, noise: float = 0.05,
                      outliers: float = 0.0) -> np.ndarray:
    """Times α + nβ with lognormal noise (a spread proportional to the time); rows of `repeats` if > 0,
    a fraction `outliers` of them slowed 3 to 30 times (the process was descheduled)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    shape = (len(sizes), repeats) if repeats else (len(sizes),)
    exact = (alpha + sizes * beta).reshape(-1, *([1] if repeats else []))
    seconds = exact * rng.lognormal(0.0, noise, shape)
    slow = rng.random(shape) < outliers
    return np.where(slow, seconds * rng.uniform(3, 30, shape), seconds)


def _sweep(largest: int) -> list[int]:
    """Sizes in bytes as a benchmark sweeps them: 8 B and then every power of 4 up to `largest`."""
    return [8 * 4**k for k in range(int(math.log(largest / 8, 4)) + 1)]


def _fit_cases(rng, hidden: bool) -> list[tuple[str, dict]]:
    alpha, beta = NETWORKS["loopback TCP"]
    cases = [("gloo over loopback, one median per size", {"sizes": _sweep(4 * MiB), "alpha": alpha, "beta": beta}),
             ("NVLink 4, 9 repeats per size, 10% of them slowed", {"sizes": _sweep(GiB), "repeats": 9, "outliers": 0.1,
                                                                    "alpha": NETWORKS["NVLink 4"][0],
                                                                    "beta": NETWORKS["NVLink 4"][1]})]
    if hidden:
        cases = [("two sizes, no noise: an exact line",
                  {"sizes": [0, MiB], "noise": 0.0, "alpha": alpha, "beta": beta}),
                 ("an even number of repeats (4)", {"sizes": _sweep(64 * MiB), "repeats": 4, "outliers": 0.1,
                                                    "alpha": NETWORKS["PCIe 5.0 x16"][0],
                                                    "beta": NETWORKS["PCIe 5.0 x16"][1]})]
        for name, (alpha, beta) in NETWORKS.items():
            repeats = int(rng.choice([0, 5, 11]))
            cases.append((f"{name}, {repeats or 'one median'} per size",
                          {"sizes": _sweep(int(2 ** rng.uniform(20, 30))), "repeats": repeats,
                           "outliers": float(rng.uniform(0, 0.2)), "noise": float(rng.uniform(0.02, 0.1)),
                           "alpha": float(alpha * rng.uniform(0.5, 2)), "beta": float(beta * rng.uniform(0.5, 2))}))
    data = []
    for name, spec in cases:
        spec = dict(spec)
        alpha, beta, sizes = spec.pop("alpha"), spec.pop("beta"), spec.pop("sizes")
        data.append((name, {"sizes": [int(s) for s in sizes],
                            "seconds": synthetic_timings(rng, alpha, beta, sizes, **spec).tolist()}))
    return data


def _compare_fit(student, name: str, case: dict, label: str) -> None:
    expected = cost.fit(**case)
    got = student.call("fit_alpha_beta", returns="list", **case)
    if len(got) != 2:
        raise CheckFailure(f"{label} ({name}): fit_alpha_beta must return two numbers (alpha, beta), got "
                           f"{describe(got)}")
    for i, what in enumerate(("alpha", "beta")):
        try:
            assert_close(got[i], expected[i], rtol=1e-4, atol=0, where=what)
        except CheckFailure as failure:
            small = case["sizes"][0]
            raise CheckFailure(
                f"{label} ({name}): {failure}. Take the median over repeats (a row of `seconds`), then fit in "
                f"relative error, weighting each point by 1/t²: an unweighted fit is decided by the largest "
                f"messages, whose noise alone is larger than α, so α comes out wrong; and a mean is dragged "
                f"up by the slowed runs." + unredacted(f" (sizes from {small} to {case['sizes'][-1]} bytes)")
            ) from None


@check(points=2)
def fit_alpha_beta(student, rng, hidden):
    """fit_alpha_beta(sizes, seconds) recovers α and β: median over repeats, least squares in relative error."""
    cases = _fit_cases(rng, hidden)
    for i, (name, case) in enumerate(cases, 1):
        _compare_fit(student, name, case, f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}")


# ----------------------------------------------------------------------------------------- crossover


def _crossover_cases(rng, hidden: bool) -> list[dict]:
    if not hidden:
        alpha, beta = NETWORKS["NVLink 4"]
        return [{"collective": "all_reduce", "algorithm_a": "ring", "algorithm_b": "recursive_doubling",
                 "world_size": p, "alpha": alpha, "beta": beta} for p in (4, 6, 8)] + [
                {"collective": "all_reduce", "algorithm_a": "tree", "algorithm_b": "ring", "world_size": 16,
                 "alpha": alpha, "beta": beta},
                {"collective": "all_gather", "algorithm_a": "ring", "algorithm_b": "recursive_doubling",
                 "world_size": 8, "alpha": alpha, "beta": beta}]  # parallel lines: None
    cases = []
    for p in (1, 2, 3, 5, 8, int(rng.integers(9, 65))):
        alpha, beta = list(NETWORKS.values())[int(rng.integers(len(NETWORKS)))]
        for collective in cost.COLLECTIVES:
            for a in cost.algorithms(collective):
                for b in cost.algorithms(collective):
                    cases.append({"collective": collective, "algorithm_a": a, "algorithm_b": b, "world_size": p,
                                  "alpha": alpha, "beta": beta})
    return cases


@check(points=2)
def crossover(student, rng, hidden):
    """crossover(collective, algorithm_a, algorithm_b, world_size, alpha, beta): the size where the times meet, or
    None."""
    cases = _crossover_cases(rng, hidden)
    for i, case in enumerate(cases, 1):
        expected = cost.crossover(**case)
        got = student.call("crossover", returns="any", **case)
        call = ", ".join(f"{k}={describe(v)}" for k, v in case.items())
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: crossover({call})"
        if expected is None and got is not None:
            raise CheckFailure(f"{label}: expected None, got {describe(got)}: the two lines do not cross at any size "
                               "> 0 (they are parallel, they meet at 0 bytes, or the one with fewer messages also "
                               "moves fewer bytes, so it is never slower)")
        if expected is not None and (isinstance(got, bool) or not isinstance(got, (int, float))):
            raise CheckFailure(f"{label}: expected a size in bytes{unredacted(f' ({expected:.6g})')}, "
                               f"got {describe(got)}")
        if expected is not None:
            assert_close(got, expected, rtol=1e-9, atol=0, where=label)


# ----------------------------------------------------------------------------------------- measured


@check(points=1)
def measured_fit(student, rng, hidden):
    """fit_alpha_beta on your own ping-pong measurement (from `measurements()`) agrees with the reference fit."""
    data = student.call("measurements", returns="mapping")
    if set(data) != {"sizes", "seconds"}:
        keys = unredacted(f"keys {sorted(data)}", f"{len(data)} other keys")  # the student's own text
        raise CheckFailure(f"measurements() must return {{'sizes': ..., 'seconds': ...}}, got {keys}: "
                           "run the measurement cells above again")
    try:
        cost.fit(data["sizes"], data["seconds"])
    except (TypeError, ValueError) as error:
        raise CheckFailure(f"your measurement cannot be fitted{unredacted(f' ({error})')}: run the measurement cells "
                           "again") from None
    _compare_fit(student, "your ping-pong measurement", {"sizes": data["sizes"], "seconds": data["seconds"]},
                 "measured")
