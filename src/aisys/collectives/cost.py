"""The α-β cost model of collectives: time = a·α + b·β, with a messages in sequence and b bytes on the busiest link.

α is the fixed cost of one message (software, link latency), β the time per byte (1 / the link's
one-way bandwidth). Each algorithm of a collective on p ranks with an n-byte buffer costs
`a` latencies and `b` = f(p)·n bytes along its critical path (Hockney 1994; the formulas are those
of Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005, in their notation lg p = log2 p):

    all_reduce      ring                2(p-1) α + 2(p-1)/p n β     §4.4; Patarasuk & Yuan 2009
                    tree                2⌈lg p⌉ α + 2⌈lg p⌉ n β     binomial reduce (§4.2) + broadcast (§3.2)
                    recursive_doubling  lg p (α + n β)              §4.4
                    halving_doubling    2 lg p α + 2(p-1)/p n β     §4.4 (Rabenseifner)
    all_gather      ring                (p-1) α + (p-1)/p n β       §3.1
                    recursive_doubling  ⌈lg p⌉ α + (p-1)/p n β      §3.1 (Bruck et al. when p is not a power of two)
    reduce_scatter  ring                (p-1) α + (p-1)/p n β       §3.3 (the all-gather ring, reversed)
                    halving_doubling    ⌈lg p⌉ α + (p-1)/p n β      §3.3 (recursive halving)
    broadcast       tree                ⌈lg p⌉ (α + n β)            §3.2 (binomial tree)
                    ring                (⌈lg p⌉ + p-1) α + 2(p-1)/p n β   §3.2 (van de Geijn: scatter + ring all-gather)
                    recursive_doubling  2⌈lg p⌉ α + 2(p-1)/p n β    §3.2 (scatter + recursive-doubling all-gather)

n is always the size of one rank's full buffer (for all-gather the gathered output, for
reduce-scatter the input), as in nccl-tests and `aisys.collectives.busbw`.

All-reduce by recursive doubling or halving-doubling pairs ranks r and r XOR 2^k, which needs a
power of two. For other p, Thakur et al.'s §4.4 fold is counted (what `aisys.collectives.tree`
runs): with p' = 2^⌊lg p⌋, the p - p' extra ranks first hand their whole buffer to a partner
(α + nβ), p' ranks run the algorithm, and the result goes back (α + nβ): two more steps.
All-gather and reduce-scatter need no fold: Bruck's dissemination all-gather takes ⌈lg p⌉ steps
for any p, and a reduce-scatter is an all-gather run backwards (same messages, reversed).

The γ term (time per byte to apply the reduction) is left out: on a GPU the addition runs at
memory bandwidth, several times faster than any link, and timings of point-to-point messages,
from which α and β are fitted here, cannot measure it. On CPUs it is not negligible; the book
page says where it shows.
"""

import math

import numpy as np

from .._validate import nonnegative_number, one_of, positive_int, positive_number


def ceil_log2(p: int) -> int:
    """⌈lg p⌉: rounds of a binomial tree or of Bruck's algorithm on p ranks (0 for p = 1)."""
    return (p - 1).bit_length()


def floor_log2(p: int) -> int:
    """⌊lg p⌋: rounds of recursive doubling among the largest power of two ≤ p ranks."""
    return p.bit_length() - 1


def is_power_of_two(p: int) -> bool:
    return p & (p - 1) == 0


def _ring_all_reduce(p):
    return 2 * (p - 1), 2 * (p - 1) / p


def _tree_all_reduce(p):
    return 2 * ceil_log2(p), 2 * ceil_log2(p)


def _recursive_doubling_all_reduce(p):
    steps = floor_log2(p) + (0 if is_power_of_two(p) else 2)  # + the fold and the unfold
    return steps, steps


def _halving_doubling_all_reduce(p):
    survivors = 1 << floor_log2(p)
    latency, volume = 2 * floor_log2(survivors), 2 * (survivors - 1) / survivors
    if p != survivors:  # the fold and the unfold each move the whole buffer once
        latency, volume = latency + 2, volume + 2
    return latency, volume


def _ring_all_gather(p):
    return p - 1, (p - 1) / p


def _doubling_all_gather(p):
    return ceil_log2(p), (p - 1) / p


def _binomial_broadcast(p):
    return ceil_log2(p), ceil_log2(p)


def _scatter_then(all_gather):
    """van de Geijn's broadcast: a binomial scatter (⌈lg p⌉ α + (p-1)/p n β), then an all-gather."""
    def cost(p):
        latency, volume = all_gather(p)
        return ceil_log2(p) + latency, (p - 1) / p + volume
    return cost


# (collective, algorithm) -> (p -> (latency count, bytes on the critical path per byte of buffer), formula as text)
FORMULAS = {
    ("all_reduce", "ring"): (_ring_all_reduce, "2(p-1)", "2(p-1)/p"),
    ("all_reduce", "tree"): (_tree_all_reduce, "2⌈lg p⌉", "2⌈lg p⌉"),
    ("all_reduce", "recursive_doubling"): (_recursive_doubling_all_reduce,
                                           "lg p, or ⌊lg p⌋+2 if p is not a power of two",
                                           "lg p, or ⌊lg p⌋+2 if p is not a power of two"),
    ("all_reduce", "halving_doubling"): (_halving_doubling_all_reduce,
                                         "2 lg p, or 2⌊lg p⌋+2 if p is not a power of two",
                                         "2(p-1)/p, or 2(p'-1)/p'+2 with p'=2^⌊lg p⌋ if p is not a power of two"),
    ("all_gather", "ring"): (_ring_all_gather, "p-1", "(p-1)/p"),
    ("all_gather", "recursive_doubling"): (_doubling_all_gather, "⌈lg p⌉", "(p-1)/p"),
    ("reduce_scatter", "ring"): (_ring_all_gather, "p-1", "(p-1)/p"),
    ("reduce_scatter", "halving_doubling"): (_doubling_all_gather, "⌈lg p⌉", "(p-1)/p"),
    ("broadcast", "tree"): (_binomial_broadcast, "⌈lg p⌉", "⌈lg p⌉"),
    ("broadcast", "ring"): (_scatter_then(_ring_all_gather), "⌈lg p⌉+p-1", "2(p-1)/p"),
    ("broadcast", "recursive_doubling"): (_scatter_then(_doubling_all_gather), "2⌈lg p⌉", "2(p-1)/p"),
}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
ALGORITHMS = ("ring", "tree", "recursive_doubling", "halving_doubling")


def algorithms(collective: str) -> tuple[str, ...]:
    """The algorithms this model prices for `collective`."""
    one_of("collective", collective, COLLECTIVES)
    return tuple(algorithm for c, algorithm in FORMULAS if c == collective)


def _formula(collective: str, algorithm: str):
    one_of("algorithm", algorithm, ALGORITHMS)
    if (collective, algorithm) not in FORMULAS:
        raise ValueError(f"algorithm {algorithm!r} is not one this model prices for {collective}: "
                         f"use one of {', '.join(map(repr, algorithms(collective)))}")
    return FORMULAS[collective, algorithm]


def formula(collective: str, algorithm: str) -> tuple[str, str]:
    """The two factors as text, e.g. ('2(p-1)', '2(p-1)/p') for the ring all-reduce: time = first·α + second·n·β."""
    _, latency, volume = _formula(collective, algorithm)
    return latency, volume


def terms(collective: str, algorithm: str, nbytes: float, world_size: int) -> tuple[int, float]:
    """(a, b) in time = a·α + b·β: messages in sequence and bytes on the critical path, for an `nbytes` buffer."""
    cost, _, _ = _formula(collective, algorithm)
    nbytes = nonnegative_number("nbytes", nbytes)
    latency, volume = cost(positive_int("world_size", world_size))
    return latency, volume * nbytes


def time(collective: str, algorithm: str, nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """Predicted seconds for `collective` by `algorithm` on `world_size` ranks with an `nbytes` buffer."""
    latency, volume = terms(collective, algorithm, nbytes, world_size)
    return latency * nonnegative_number("alpha", alpha) + volume * nonnegative_number("beta", beta)


def crossover(collective: str, algorithm_a: str, algorithm_b: str, world_size: int,
              alpha: float, beta: float) -> float | None:
    """Buffer size in bytes at which the two algorithms' predicted times are equal; None if one is never slower.

    Both times are straight lines in n, a_i α + f_i n β, so they meet once at
    n = (a_a - a_b) α / ((f_b - f_a) β) — if that is a positive size. Below it the algorithm with
    fewer messages wins, above it the one that moves fewer bytes.
    """
    alpha, beta = positive_number("alpha", alpha), positive_number("beta", beta)
    latency_a, volume_a = terms(collective, algorithm_a, 1, world_size)
    latency_b, volume_b = terms(collective, algorithm_b, 1, world_size)
    if math.isclose(volume_a, volume_b, rel_tol=1e-12, abs_tol=1e-12):
        return None  # parallel lines: the one with fewer messages is faster at every size (or they tie)
    nbytes = (latency_a - latency_b) * alpha / ((volume_b - volume_a) * beta)
    return nbytes if nbytes > 0 else None


def fit(sizes, seconds) -> tuple[float, float]:
    """(α, β) of the line t = α + nβ through point-to-point timings, by least squares in relative error.

    `seconds` holds one time per size, or one row of repeats per size: a row is reduced to its
    median first, so that a few runs slowed by the operating system (timings have a heavy tail)
    do not move the fit. Each point is then weighted by 1/t², i.e. the fit minimises the sum of
    ((α + nβ - t) / t)²: unweighted least squares would fit the large messages, whose times are a
    million times longer, and leave α — which only the small messages show — anywhere.
    """
    sizes, seconds = _timings(sizes, seconds)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / seconds[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return float(alpha), float(beta)


def _timings(sizes, seconds) -> tuple[np.ndarray, np.ndarray]:
    """Sizes (n,) and median seconds (n,) as float arrays, after checking them."""
    try:
        sizes = np.asarray(sizes, dtype=np.float64)
        seconds = np.asarray(seconds, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"sizes and seconds must be numbers (lists or arrays); {error}") from None
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be one-dimensional (one size in bytes per point), got shape {sizes.shape}")
    if seconds.ndim not in (1, 2) or seconds.shape[0] != sizes.shape[0] or 0 in seconds.shape:
        raise ValueError(f"seconds must have shape ({len(sizes)},) or ({len(sizes)}, repeats), one row per size; "
                         f"got shape {seconds.shape}")
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ValueError("sizes must be finite numbers of bytes >= 0")
    if not np.all(np.isfinite(seconds)) or np.any(seconds <= 0):
        raise ValueError("seconds must be finite times > 0")
    if len(np.unique(sizes)) < 2:
        raise ValueError("sizes must hold at least two different sizes: a line needs two points")
    if seconds.ndim == 2:
        seconds = np.median(seconds, axis=1)
    return sizes, seconds
