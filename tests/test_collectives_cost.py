"""The α-β cost model (aisys.collectives.cost) and the timings it is fitted to (aisys.collectives.measure).

The formulas are checked against the messages real algorithms post: each rank's recorded traffic
is replayed on the model's machine, where a rank sends one message at a time (a message takes
α + nβ, and the next send of that rank starts after it) and a receive ends α + nβ after both it
was posted and its message started. The latest finish over ranks, replayed with (α, β) = (1, 0),
counts the messages on the critical path; with (0, 1), its bytes.
"""

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from aisys.collectives import cost, measure, ring, traffic, tree
from aisys.collectives.launch import run_ranks

ALL_REDUCES = {
    "ring": lambda x: ring.all_reduce(x, check_sizes=False),
    "tree": tree.tree_all_reduce,
    "recursive_doubling": tree.recursive_doubling_all_reduce,
    "halving_doubling": tree.halving_doubling_all_reduce,
}


def binomial_broadcast(x):
    """A toy binomial-tree broadcast from rank 0: in round k, ranks below 2^k send to rank + 2^k."""
    rank, p = dist.get_rank(), dist.get_world_size()
    distance = 1
    while distance < p:
        if rank < distance and rank + distance < p:
            dist.send(x, rank + distance)
        elif distance <= rank < 2 * distance:
            dist.recv(x, rank - distance)
        distance *= 2


def recorded(fn, x):
    with traffic.record(allow_collectives=True) as log:  # the tree module agrees on sizes with one all_gather
        fn(x)
    return [m.to_plain() for m in log.messages]


def traffic_of(fn, world_size: int, numel: int) -> list[list[dict]]:
    """Each rank's messages when `fn` runs on a float32 tensor of `numel` elements."""
    return run_ranks(recorded, world_size, [(fn, torch.ones(numel))] * world_size)


def critical_path(messages: list[list[dict]], alpha: float, beta: float) -> float:
    """Finish time of the slowest rank when the messages are replayed in each rank's posting order."""
    clock, port_free = [0.0] * len(messages), [0.0] * len(messages)
    started: dict[tuple[int, int], list[float]] = {}  # (sender, receiver) -> start of each message
    received: dict[tuple[int, int], int] = {}
    position = [0] * len(messages)
    progress = True
    while progress:
        progress = False
        for rank, log in enumerate(messages):
            while position[rank] < len(log):
                message = log[position[rank]]
                if message["kind"] == "send":  # posting costs nothing, but the rank's link sends one at a time
                    start = max(clock[rank], port_free[rank])
                    port_free[rank] = start + alpha + message["nbytes"] * beta
                    started.setdefault((rank, message["peer"]), []).append(start)
                else:
                    pair = (message["peer"], rank)
                    count = received.get(pair, 0)
                    if count >= len(started.get(pair, [])):
                        break  # its send is not posted yet: let the other ranks go on
                    received[pair] = count + 1
                    clock[rank] = max(clock[rank], started[pair][count]) + alpha + message["nbytes"] * beta
                position[rank] += 1
                progress = True
    assert all(position[r] == len(log) for r, log in enumerate(messages)), "the replay is stuck: unmatched receives"
    return max(clock)


def assert_model_matches(collective, algorithm, messages, nbytes, p):
    latency, volume = cost.terms(collective, algorithm, nbytes, p)
    assert critical_path(messages, 1, 0) == latency, f"{collective} {algorithm} p={p}: messages in sequence"
    assert critical_path(messages, 0, 1) == pytest.approx(volume), f"{collective} {algorithm} p={p}: bytes"


@pytest.mark.parametrize("algorithm", list(ALL_REDUCES))
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_all_reduce_formulas_match_the_algorithms_traffic(algorithm, world_size):
    numel = 8 * 60  # divisible by every p and by the halvings, so chunks are equal
    messages = traffic_of(ALL_REDUCES[algorithm], world_size, numel)
    assert_model_matches("all_reduce", algorithm, messages, numel * 4, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_ring_reduce_scatter_and_all_gather_formulas_match_their_traffic(world_size):
    numel = 60
    for collective, fn in (("reduce_scatter", lambda x: ring.reduce_scatter(x, check_sizes=False)),
                           ("all_gather", lambda x: ring.all_gather(x, check_sizes=False))):
        assert_model_matches(collective, "ring", traffic_of(fn, world_size, numel), numel * 4, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_binomial_broadcast_formula_matches_its_traffic(world_size):
    assert_model_matches("broadcast", "tree", traffic_of(binomial_broadcast, world_size, 10), 40, world_size)


def test_every_formula_is_free_on_one_rank_and_grows_with_the_size():
    for collective, algorithm in cost.FORMULAS:
        assert cost.terms(collective, algorithm, 1 << 20, 1) == (0, 0.0)
        for p in (2, 3, 8, 64):
            small = cost.time(collective, algorithm, 10, p, 1e-6, 1e-9)
            assert 0 < small < cost.time(collective, algorithm, 10**6, p, 1e-6, 1e-9)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7, 8, 12, 16, 33, 64])
def test_formulas_by_hand(p):
    lg, ceil = math.log2(p), math.ceil(math.log2(p))
    n, power = 1000, lg == int(lg)
    fold_lg = int(lg) + (0 if power else 2)
    assert cost.terms("all_reduce", "ring", n, p) == (2 * (p - 1), pytest.approx(2 * (p - 1) / p * n))
    assert cost.terms("all_reduce", "tree", n, p) == (2 * ceil, 2 * ceil * n)
    assert cost.terms("all_reduce", "recursive_doubling", n, p) == (fold_lg, fold_lg * n)
    assert cost.terms("all_gather", "ring", n, p) == (p - 1, pytest.approx((p - 1) / p * n))
    assert cost.terms("all_gather", "recursive_doubling", n, p) == (ceil, pytest.approx((p - 1) / p * n))
    assert cost.terms("reduce_scatter", "halving_doubling", n, p) == (ceil, pytest.approx((p - 1) / p * n))
    assert cost.terms("broadcast", "tree", n, p) == (ceil, ceil * n)
    assert cost.terms("broadcast", "ring", n, p) == (ceil + p - 1, pytest.approx(2 * (p - 1) / p * n))
    assert cost.terms("broadcast", "recursive_doubling", n, p) == (2 * ceil, pytest.approx(2 * (p - 1) / p * n))
    if power:  # Rabenseifner: a reduce-scatter by halving plus an all-gather by doubling
        rs = cost.terms("reduce_scatter", "halving_doubling", n, p)
        ag = cost.terms("all_gather", "recursive_doubling", n, p)
        assert cost.terms("all_reduce", "halving_doubling", n, p) == (rs[0] + ag[0], pytest.approx(rs[1] + ag[1]))


def test_formula_text_names_both_terms():
    assert cost.formula("all_reduce", "ring") == ("2(p-1)", "2(p-1)/p")
    assert set(cost.algorithms("all_reduce")) == set(cost.ALGORITHMS)
    assert cost.algorithms("broadcast") == ("tree", "ring", "recursive_doubling")


# ------------------------------------------------------------------------------------------------ fit


def synthetic(alpha, beta, rng, repeats=None, noise=0.03, outliers=0.0, largest=2**26):
    sizes = np.unique(np.geomspace(8, largest, 20).astype(int))
    shape = (len(sizes),) if repeats is None else (len(sizes), repeats)
    seconds = (alpha + sizes * beta).reshape(-1, *([1] if repeats else [])) * rng.lognormal(0, noise, shape)
    if outliers:
        slow = rng.random(shape) < outliers
        seconds = np.where(slow, seconds * rng.uniform(3, 50, shape), seconds)
    return sizes, seconds


@pytest.mark.parametrize("seed", range(5))
def test_fit_recovers_alpha_and_beta_from_noisy_timings(seed):
    rng = np.random.default_rng(seed)
    alpha, beta = 10 ** rng.uniform(-6, -4), 1 / 10 ** rng.uniform(9, 11.7)
    fitted = cost.fit(*synthetic(alpha, beta, rng))
    assert fitted == (pytest.approx(alpha, rel=0.05), pytest.approx(beta, rel=0.05))


@pytest.mark.parametrize("seed", range(5))
def test_fit_takes_the_median_of_repeats_so_outliers_do_not_move_it(seed):
    rng = np.random.default_rng(seed)
    sizes, seconds = synthetic(30e-6, 1 / 4e9, rng, repeats=15, outliers=0.15)
    assert cost.fit(sizes, seconds) == (pytest.approx(30e-6, rel=0.05), pytest.approx(1 / 4e9, rel=0.05))
    with pytest.raises(AssertionError):  # the mean, by contrast, is dragged up by the slow runs
        assert cost.fit(sizes, seconds.mean(axis=1)) == (pytest.approx(30e-6, rel=0.05),
                                                         pytest.approx(1 / 4e9, rel=0.05))


def test_unweighted_least_squares_would_lose_alpha():
    """Why the fit is in relative error: the absolute residuals of large messages swamp α."""
    unweighted = []
    for seed in range(10):
        sizes, seconds = synthetic(3.4e-6, 1 / 450e9, np.random.default_rng(seed), largest=2**30, noise=0.1)  # NVLink 4
        (alpha, beta), *_ = np.linalg.lstsq(np.stack([np.ones(len(sizes)), sizes], 1), seconds, rcond=None)
        unweighted.append(abs(alpha - 3.4e-6) / 3.4e-6)
        assert cost.fit(sizes, seconds)[0] == pytest.approx(3.4e-6, rel=0.1)
    assert np.median(unweighted) > 0.5  # 10% of 2.4 ms is 240 µs: the noise on 1 GiB outweighs α


def test_fit_is_exact_on_a_line():
    sizes = [1, 10, 100, 1000]
    assert cost.fit(sizes, [2e-6 + s * 1e-9 for s in sizes]) == (pytest.approx(2e-6), pytest.approx(1e-9))


@pytest.mark.parametrize("sizes, seconds, error, words", [
    ([8, 16], [1e-6], ValueError, "seconds must have shape (2,)"),
    ([[8, 16]], [1e-6], ValueError, "sizes must be one-dimensional"),
    ([8, 8], [1e-6, 2e-6], ValueError, "two different sizes"),
    ([8, 16], [1e-6, 0.0], ValueError, "seconds must be finite times > 0"),
    ([8, 16], [1e-6, float("nan")], ValueError, "seconds must be finite times > 0"),
    ([-8, 16], [1e-6, 2e-6], ValueError, "sizes must be finite numbers of bytes >= 0"),
    (["a", 16], [1e-6, 2e-6], TypeError, "sizes and seconds must be numbers"),
    ([8, 16], np.ones((2, 0)), ValueError, "seconds must have shape"),
])
def test_fit_rejects_bad_timings(sizes, seconds, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        cost.fit(sizes, seconds)


# ------------------------------------------------------------------------------------------ crossover


def brute_force_crossover(collective, a, b, p, alpha, beta):
    """The first size on a fine grid where the sign of time(a) - time(b) changes, refined by bisection."""
    sizes = np.geomspace(1e-3, 1e15, 4000)
    diff = [cost.time(collective, a, n, p, alpha, beta) - cost.time(collective, b, n, p, alpha, beta) for n in sizes]
    changes = [i for i in range(len(sizes) - 1) if np.sign(diff[i]) != np.sign(diff[i + 1]) and diff[i] != 0]
    if not changes:
        return None
    low, high = sizes[changes[0]], sizes[changes[0] + 1]
    sign = np.sign(diff[changes[0]])
    for _ in range(200):
        middle = (low + high) / 2
        d = cost.time(collective, a, middle, p, alpha, beta) - cost.time(collective, b, middle, p, alpha, beta)
        low, high = (middle, high) if np.sign(d) == sign else (low, middle)
    return low


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16, 64])
def test_crossover_agrees_with_a_brute_force_search(p):
    alpha, beta = 5e-6, 1 / 50e9
    for collective in cost.COLLECTIVES:
        names = cost.algorithms(collective)
        for a in names:
            for b in names:
                expected = brute_force_crossover(collective, a, b, p, alpha, beta)
                got = cost.crossover(collective, a, b, p, alpha, beta)
                assert (got is None) == (expected is None), (collective, a, b, p, got, expected)
                if got is not None:
                    assert got == pytest.approx(expected, rel=1e-6)


def test_ring_against_recursive_doubling_crossover_in_closed_form():
    # p = 4: 6α + 1.5nβ = 2α + 2nβ  at  n = 8α/β
    assert cost.crossover("all_reduce", "ring", "recursive_doubling", 4, 30e-6, 1e-9) == pytest.approx(8 * 30e-6 / 1e-9)
    assert cost.crossover("all_reduce", "ring", "recursive_doubling", 2, 30e-6, 1e-9) is None  # same costs at p=2
    assert cost.crossover("all_reduce", "ring", "ring", 8, 30e-6, 1e-9) is None


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("call, error, words", [
    (lambda: cost.time("all_to_all", "ring", 8, 4, 1e-6, 1e-9), ValueError, "collective must be one of"),
    (lambda: cost.time("all_reduce", "bruck", 8, 4, 1e-6, 1e-9), ValueError, "algorithm must be one of"),
    (lambda: cost.time("all_gather", "tree", 8, 4, 1e-6, 1e-9), ValueError, "not one this model prices for all_gather"),
    (lambda: cost.time("broadcast", "halving_doubling", 8, 4, 1e-6, 1e-9), ValueError, "use one of 'tree'"),
    (lambda: cost.time("all_reduce", "ring", -1, 4, 1e-6, 1e-9), ValueError, "nbytes must be a number >= 0"),
    (lambda: cost.time("all_reduce", "ring", 8, 0, 1e-6, 1e-9), ValueError, "world_size must be an integer >= 1"),
    (lambda: cost.time("all_reduce", "ring", 8, 2.5, 1e-6, 1e-9), ValueError, "world_size must be an integer >= 1"),
    (lambda: cost.time("all_reduce", "ring", 8, 4, -1e-6, 1e-9), ValueError, "alpha must be a number >= 0"),
    (lambda: cost.time("all_reduce", "ring", 8, 4, 1e-6, None), ValueError, "beta must be a number >= 0"),
    (lambda: cost.terms("all_reduce", "ring", "8", 4), ValueError, "nbytes must be a number >= 0"),
    (lambda: cost.crossover("all_reduce", "ring", "tree", 4, 0, 1e-9), ValueError, "alpha must be a finite number > 0"),
    (lambda: cost.crossover("all_reduce", "ring", "tree", 4, 1e-6, 0), ValueError, "beta must be a finite number > 0"),
    (lambda: cost.crossover("all_reduce", "ring", "broadcast", 4, 1e-6, 1e-9), ValueError, "algorithm must be one of"),
])
def test_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ------------------------------------------------------------------------------------------ measure


def test_ping_pong_gives_one_positive_time_per_size():
    seconds = measure.ping_pong([1, 4096, 65536], repeats=3)
    assert seconds.shape == (3,) and np.all(seconds > 0)


@pytest.mark.parametrize("world_size", [1, 3])
def test_time_collective_gives_one_positive_time_per_size(world_size):
    seconds = measure.time_collective(ALL_REDUCES["ring"], [4, 400], world_size, repeats=2)
    assert seconds.shape == (2,) and np.all(seconds > 0)


@pytest.mark.parametrize("call, error, words", [
    (lambda: measure.ping_pong([0, 8]), ValueError, r"sizes\[0\] must be an integer >= 1"),
    (lambda: measure.ping_pong([]), ValueError, "sizes must hold at least one size"),
    (lambda: measure.ping_pong(8), TypeError, "sizes must be a list of sizes in bytes"),
    (lambda: measure.ping_pong([8], repeats=0), ValueError, "repeats must be an integer >= 1"),
    (lambda: measure.ping_pong([8], backend="mpi"), ValueError, "backend must be one of"),
    (lambda: measure.time_collective(print, [6], 2), ValueError,
     r"sizes\[0\] = 6 bytes is not a whole number of 4-byte"),
    (lambda: measure.time_collective(print, [8], 2, dtype="float99"), ValueError, "dtype must name a torch dtype"),
    (lambda: measure.time_collective(None, [8], 2), TypeError, "fn must be a function"),
    (lambda: measure.time_collective(print, [8], 0), ValueError, "world_size must be an integer >= 1"),
])
def test_measure_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_measured_crossover_interpolates_on_log_axes():
    sizes = [10, 100, 1000, 10000]
    a = [4.0, 4.0, 4.0, 4.0]
    b = [1.0, 2.0, 8.0, 16.0]  # a becomes faster between 100 and 1000, where log(a/b) goes from log 2 to -log 2
    assert measure.measured_crossover(sizes, a, b) == pytest.approx(10**2.5)
    assert measure.measured_crossover(sizes, b, a) is None  # b starts faster and ends slower: it never "becomes faster"
    assert measure.measured_crossover(sizes, [0.5] * 4, b) is None  # a never slower
    assert measure.measured_crossover(sizes, [9, 9, 9, 99], b) is None  # a slower at every size
    with pytest.raises(ValueError, match="one time > 0 per size"):
        measure.measured_crossover(sizes, a[:3], b)
    with pytest.raises(ValueError, match="sizes must increase"):
        measure.measured_crossover([10, 1, 100, 1000], a, b)
