"""Checks: the clipping threshold of a symmetric quantizer, by min-max, percentile, KL divergence and MSE, against
aisys.quant.calibration.

Every threshold is one of the given edges or candidates (or max|x|), so each is compared exactly. The distributions:
Gaussian, Laplace, Student-t with 3 degrees of freedom and planted outliers, a ReLU's output (half exact zeros), and
the edges: all-zero data (every method returns 0), all-equal data (all counts in the last bin), percentile 100 (the
largest magnitude), a percentile reached exactly at a bin's edge (>=, not >). KL: TensorRT's algorithm bin for bin,
on histograms of 2048 bins and smaller ones, at 8 and 4 bits, signed and unsigned; on the heavy tails it must pick a
threshold well below max|x|. MSE: candidates around the answer, at 8 and 4 bits, with outliers whose clipping error
decides it.
"""

import numpy as np

from aisys.quant import calibration
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, shown, unredacted

EXACT = (0, 0)  # a threshold is one of the given edges or candidates: the right one, exactly


def _heavy(rng, n):
    """Student-t with 3 degrees of freedom and a few outliers 20 times out."""
    x = rng.standard_t(3, n)
    x[rng.choice(n, 5, replace=False)] *= 20
    return x


def _distributions(rng, n):
    return {"gauss": rng.standard_normal(n), "laplace": rng.laplace(size=n), "student-t": _heavy(rng, n),
            "relu": np.maximum(rng.standard_normal(n), 0.0) * 3}


def _hist(x, bins):
    counts, edges = calibration.histogram(x, bins)
    return {"counts": counts, "edges": edges}


@check(points=1)
def max_threshold(student, rng, hidden):
    """max_threshold(x): max|x|, the negative side included."""
    cases = [{"x": np.array([0.5, -2.0, 1.5])}, {"x": np.random.default_rng(1).standard_normal((4, 5))}]
    if hidden:
        cases = [{"x": -np.abs(rng.standard_normal(50)) - 1},  # all negative: the largest magnitude is a minimum
                 {"x": np.zeros((3, 4))}, {"x": np.full(7, 2.5)}, {"x": _heavy(rng, 1000)},
                 {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}]
    compare_cases(student, "max_threshold", cases, calibration.max_threshold, returns="number", hidden=hidden,
                  tolerance=EXACT)


@check(points=2)
def percentile_threshold(student, rng, hidden):
    """percentile_threshold(counts, edges, percentile): the upper edge of the bin where the cumulative count
    reaches the percentile; 100 gives max|x|."""
    toy = {"counts": np.array([5, 3, 0, 1, 1], np.int64), "edges": np.arange(6.0) / 2}
    cases = [{**toy, "percentile": 50.0},  # 5 of 10 below edges[1]: exactly 50 percent
             {**_hist(np.random.default_rng(2).laplace(size=2000), 256), "percentile": 99.0}]
    if hidden:
        data = _distributions(rng, 5000)
        cases = [{**toy, "percentile": 100.0}, {**toy, "percentile": 80.0},  # reached at an edge: >=, not >
                 {**toy, "percentile": 80.5}, {**toy, "percentile": 0.1},
                 {**_hist(np.zeros(100), 64), "percentile": 99.0},  # all zero: 0
                 {**_hist(np.full(100, -1.5), 64), "percentile": 50.0},  # all equal: every count in the last bin
                 *({**_hist(x, 512), "percentile": p} for x, p in zip(data.values(), (99.9, 99.99, 100.0, 99.0)))]
    compare_cases(student, "percentile_threshold", cases, calibration.percentile_threshold, returns="number",
                  hidden=hidden, tolerance=EXACT)


def _kl_compare(got, expected, case):
    """Exact, and for a heavy tail a reminder of what the answer looks like."""
    if not isinstance(got, (int, float)) or got != expected:
        edges = case["edges"]
        where = (f" (edge {int(np.argmin(np.abs(edges - got)))} of {len(edges) - 1}, expected edge "
                 f"{int(np.argmin(np.abs(edges - expected)))})") if isinstance(got, (int, float)) else ""
        raise CheckFailure(f"threshold {shown(got, '!r')}, expected {shown(expected, '!r')}" + unredacted(where))


@check(points=3)
def kl_threshold(student, rng, hidden):
    """kl_threshold(counts, edges, bits, unsigned, start_bin): TensorRT's entropy calibration, bin for bin."""
    fixed = np.random.default_rng(3)
    cases = [{**_hist(_heavy(fixed, 20_000), 2048)},  # TensorRT's 2048 bins: KL clips far below max|x|
             {**_hist(fixed.laplace(size=5000), 512), "bits": 4, "start_bin": 128}]
    if hidden:
        data = _distributions(rng, 8000)
        cases = [{**_hist(_heavy(fixed, 8000), 320)}, {**_hist(fixed.laplace(size=8000), 256)},
                 {**_hist(np.maximum(fixed.standard_normal(8000), 0), 256), "unsigned": True},
                 {**_hist(_heavy(fixed, 8000), 256), "bits": 4, "start_bin": 16},
                 {**_hist(np.zeros(50), 256)},  # all zero: 0
                 {**_hist(np.full(50, 0.75), 256)},  # all equal: every candidate but the last has Q = 0 where P > 0
                 *({**_hist(x, 192), "bits": 4, "start_bin": 24} for x in data.values()),
                 {**_hist(_heavy(rng, 20_000), 384)}]
    compare_cases(student, "kl_threshold", cases, calibration.kl_threshold, returns="number", hidden=hidden,
                  compare=_kl_compare)


@check(points=2)
def mse_threshold(student, rng, hidden):
    """mse_threshold(x, candidates, bits): the candidate with the least mean squared error of the fake-quantized
    (clipped and rounded) samples."""
    fixed = np.random.default_rng(4)
    heavy = _heavy(fixed, 4000)
    amax = np.abs(heavy).max()
    cases = [{"x": np.full(10, 3.0), "candidates": np.array([1.0, 2.0, 3.0, 4.0, 6.0])},  # 3: every sample exact
             {"x": heavy, "candidates": np.linspace(0.05, 1, 40) * amax, "bits": 4}]
    if hidden:
        cases = [{"x": heavy, "candidates": np.linspace(0.02, 1, 50) * amax},
                 {"x": fixed.laplace(size=3000), "candidates": np.linspace(1, 12, 45), "bits": 4},
                 {"x": np.zeros(20), "candidates": np.array([0.5, 1.0])},  # all zero: every error 0, the first
                 {"x": np.array([-4.0, -0.01, 0.02, 4.0]), "candidates": np.array([4.0, 2.0, 1.0, 0.5])},
                 *({"x": x, "candidates": np.linspace(0.05, 1, 30) * np.abs(x).max(), "bits": int(bits)}
                   for x, bits in zip(_distributions(rng, 2000).values(), rng.choice([4, 8], 4)))]
    compare_cases(student, "mse_threshold", cases, calibration.mse_threshold, returns="number", hidden=hidden,
                  tolerance=EXACT)
