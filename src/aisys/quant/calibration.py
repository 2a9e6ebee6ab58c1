"""Calibration: the clipping threshold of a symmetric quantizer, chosen from activations by min-max, percentile, KL
divergence (TensorRT's entropy calibration) or mean squared error.

Every method returns a threshold t > 0 (or 0 when the data are all 0): values are clipped to [-t, t] and quantized
with scale t / qmax. The histogram methods read a histogram of |x|, as TensorRT and NVIDIA's pytorch-quantization
collect it: `bins` equal bins from 0 to max|x| (2048 by default), so edges[k] = k * max|x| / bins.

- min-max: t = max|x|.
- percentile p: t = edges[k] for the smallest k with 100 * (counts in bins 0..k-1) >= p * (all counts): the upper
  edge of the bin where the cumulative count reaches p percent. p = 100 gives max|x|. (pytorch-quantization's
  `_compute_amax_percentile` returns the LOWER edge of that bin, edges[k - 1], one bin less.)
- KL (Migacz 2017, "8-bit Inference with TensorRT", GTC; pytorch-quantization `calib/histogram.py`,
  `_compute_amax_entropy`), for a histogram of n bins:
  0. the first bin's count is replaced by the second's (counts[0] = counts[1]), as pytorch-quantization does: the
     first bin holds every exact 0 (a ReLU's output), which would otherwise dominate P;
  1. for each candidate i = start_bin (128), ..., n (inclusive), threshold edges[i]:
  2. P = counts[:i] with the outliers, sum(counts[i:]), added to its last bin P[i-1];
  3. Q: bins 0..i-1 fall into `levels` = 2**(bits-1) groups (128 for int8; 2**bits = 256 if unsigned), bin j into
     group (j * levels) // i; each group's total count (of counts[:i], outliers not included) is spread evenly
     over the group's non-empty bins (counts[j] > 0); empty bins get 0 (no smoothing);
  4. KL(P || Q) = sum over P[j] > 0 of p[j] * ln(p[j] / q[j]) with p = P / sum(P), q = Q / sum(Q); it is +inf where
     P[j] > 0 and Q[j] = 0 (possible only in bin i-1, when it is empty but outliers were folded into it), and where
     Q is all 0 (no counts below the candidate; pytorch-quantization gets NaN there, which its argmin would pick);
  5. the candidate with the smallest KL wins, the largest i among exact ties (pytorch-quantization's last argmin);
     the threshold is edges[i]. (Migacz's slides put it half a bin higher, at (i + 0.5) * bin width.)
- MSE: among given candidate thresholds, the one minimising mean((fake_quantize(x, t) - x) ** 2), with
  fake_quantize(x, t) = clip(round(x / s), -qmax, qmax) * s, s = t / qmax, all in float64, rounding half to even;
  the first of exact ties.
"""

import numpy as np

from .._validate import finite_array, one_of, positive_int

METHODS = ("max", "percentile", "kl", "mse")


def _samples(x) -> np.ndarray:
    return finite_array("x", x, nonempty=True).astype(np.float64).ravel()


def _histogram(counts, edges) -> tuple[np.ndarray, np.ndarray]:
    counts, edges = np.asarray(counts), np.asarray(edges, dtype=np.float64)
    if counts.ndim != 1 or counts.dtype.kind not in "iu" or (counts < 0).any() or counts.sum() == 0:
        raise ValueError(f"counts must be a 1-d array of nonnegative integers, not all 0, got {counts.dtype} "
                         f"of shape {counts.shape}")
    if edges.shape != (counts.size + 1,) or edges[0] != 0 or (np.diff(edges) < 0).any():
        raise ValueError(f"edges must be {counts.size + 1} increasing values from 0 (one more than counts), got "
                         f"shape {edges.shape}")
    return counts.astype(np.int64), edges


def histogram(x, bins: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """(counts int64, edges float64) of |x| in `bins` equal bins over [0, max|x|]; max|x| falls in the last bin.
    All-zero x: every count in bin 0, every edge 0."""
    x, bins = np.abs(_samples(x)), positive_int("bins", bins)
    amax = float(x.max())
    if amax == 0:
        counts = np.zeros(bins, np.int64)
        counts[0] = x.size
        return counts, np.zeros(bins + 1)
    counts, edges = np.histogram(x, bins=bins, range=(0.0, amax))
    return counts.astype(np.int64), edges


def max_threshold(x) -> float:
    """min-max calibration of a symmetric quantizer: max|x|."""
    return float(np.abs(_samples(x)).max())


def percentile_threshold(counts, edges, percentile: float) -> float:
    """The upper edge of the first bin where the cumulative count reaches `percentile` percent of all counts."""
    counts, edges = _histogram(counts, edges)
    percentile = float(percentile)
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    below = np.concatenate([[0], np.cumsum(counts)])  # below[k]: the counts in bins 0..k-1, below edges[k]
    k = int(np.argmax(100.0 * below >= percentile * below[-1]))
    return float(edges[k])


def kl_divergences(counts, *, bits: int = 8, unsigned: bool = False, start_bin: int = 128) -> np.ndarray:
    """KL(P || Q) of every candidate i = start_bin .. len(counts), in that order (see the module's steps 0-4)."""
    counts = _histogram(counts, np.arange(np.size(counts) + 1.0))[0].copy()
    bits, start_bin = positive_int("bits", bits), positive_int("start_bin", start_bin)
    levels = 2 ** (bits - 1 + int(bool(unsigned)))
    if start_bin > counts.size:
        raise ValueError(f"start_bin must be at most the number of bins, {counts.size}, got {start_bin}")
    counts[0] = counts[1]
    divergences = []
    for i in range(start_bin, counts.size + 1):
        kept = counts[:i].astype(np.float64)
        reference = kept.copy()
        reference[-1] += counts[i:].sum()  # outliers folded into the last bin
        group = (np.arange(i) * levels) // i
        filled = kept > 0
        total = np.bincount(group, weights=kept, minlength=levels)
        nonempty = np.bincount(group, weights=filled, minlength=levels)
        candidate = np.where(filled, total[group] / np.maximum(nonempty[group], 1), 0.0)
        divergences.append(_kl(reference, candidate))
    return np.array(divergences)


def _kl(reference: np.ndarray, candidate: np.ndarray) -> float:
    if reference.sum() == 0 or candidate.sum() == 0:
        return np.inf
    p, q = reference / reference.sum(), candidate / candidate.sum()
    mass = p > 0
    if (q[mass] == 0).any():
        return np.inf
    return float(np.sum(p[mass] * np.log(p[mass] / q[mass])))


def kl_threshold(counts, edges, *, bits: int = 8, unsigned: bool = False, start_bin: int = 128) -> float:
    """TensorRT's entropy calibration: the edge edges[i] of the candidate whose quantized distribution Q is closest
    to the clipped distribution P in KL divergence (ties: the largest i). All-zero data (edges[-1] == 0): 0."""
    counts, edges = _histogram(counts, edges)
    if edges[-1] == 0:
        return 0.0
    divergences = kl_divergences(counts, bits=bits, unsigned=unsigned, start_bin=start_bin)
    best = len(divergences) - 1 - int(np.argmin(divergences[::-1]))  # the last of the smallest
    return float(edges[start_bin + best])


def fake_quantize(x, threshold: float, bits: int = 8) -> np.ndarray:
    """x clipped to [-threshold, threshold] and rounded to one of 2 * qmax + 1 levels, in float64."""
    qmax = 2 ** (positive_int("bits", bits) - 1) - 1
    scale = float(threshold) / qmax
    return np.clip(np.round(np.asarray(x, dtype=np.float64) / scale), -qmax, qmax) * scale


def mse_errors(x, candidates, *, bits: int = 8) -> np.ndarray:
    """mean((fake_quantize(x, t) - x) ** 2) for each candidate threshold t."""
    x = _samples(x)
    candidates = np.asarray(candidates, dtype=np.float64).ravel()
    if candidates.size == 0 or not (np.isfinite(candidates) & (candidates > 0)).all():
        raise ValueError(f"candidates must be finite thresholds > 0, at least one, got shape {candidates.shape}")
    return np.array([np.mean((fake_quantize(x, t, bits) - x) ** 2) for t in candidates])


def mse_threshold(x, candidates, *, bits: int = 8) -> float:
    """The candidate threshold with the smallest mean squared error of the fake-quantized samples (ties: the
    first)."""
    candidates = np.asarray(candidates, dtype=np.float64).ravel()
    return float(candidates[int(np.argmin(mse_errors(x, candidates, bits=bits)))])


def threshold(x, method: str, *, percentile: float = 99.99, bins: int = 2048, bits: int = 8) -> float:
    """The threshold `method` picks for samples x; MSE tries the histogram's edges from bin 128 up, as KL does."""
    one_of("method", method, METHODS)
    if method == "max":
        return max_threshold(x)
    counts, edges = histogram(x, bins)
    if method == "percentile":
        return percentile_threshold(counts, edges, percentile)
    if edges[-1] == 0:
        return 0.0
    if method == "kl":
        return kl_threshold(counts, edges, bits=bits)
    return mse_threshold(x, edges[max(1, min(128, bins)):], bits=bits)
