"""aisys.quant.calibration and aisys.quant.fp8 against slow, literal restatements of their rules, and their edges."""

import numpy as np
import pytest

from aisys.quant import calibration, fp8


def _kl_slow(counts, edges, levels=128, start_bin=128):
    """TensorRT's entropy calibration, one bin at a time, as Migacz's slides and pytorch-quantization state it."""
    counts = [int(c) for c in counts]
    counts[0] = counts[1]
    best, best_i = None, None
    for i in range(start_bin, len(counts) + 1):
        p = [float(c) for c in counts[:i]]
        p[-1] += sum(counts[i:])
        q = [0.0] * i
        for g in range(levels):
            members = [j for j in range(i) if (j * levels) // i == g]
            filled = [j for j in members if counts[j] > 0]
            for j in filled:
                q[j] = sum(counts[j] for j in members) / len(filled)
        if sum(q) == 0:
            continue
        total_p, total_q = sum(p), sum(q)
        if any(pj > 0 and qj == 0 for pj, qj in zip(p, q)):
            continue
        kl = sum(pj / total_p * np.log((pj / total_p) / (qj / total_q)) for pj, qj in zip(p, q) if pj > 0)
        if best is None or kl <= best:
            best, best_i = kl, i
    return float(edges[best_i])


@pytest.mark.parametrize("seed", [0, 1])
def test_kl_threshold_matches_the_literal_algorithm_and_clips_a_heavy_tail(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, 5000)
    x[:5] *= 20
    counts, edges = calibration.histogram(x, 256)
    got = calibration.kl_threshold(counts, edges)
    assert got == _kl_slow(counts, edges)
    assert got < 0.8 * np.abs(x).max()


def test_calibration_edges():
    x = np.random.default_rng(2).laplace(size=1000)
    counts, edges = calibration.histogram(x, 128)
    assert calibration.percentile_threshold(counts, edges, 100) == np.abs(x).max()
    for method in calibration.METHODS:
        assert calibration.threshold(np.zeros(10), method) == 0.0
    counts, edges = calibration.histogram(np.full(10, 2.0), 256)
    assert calibration.kl_threshold(counts, edges) == 2.0
    with pytest.raises(ValueError, match="percentile"):
        calibration.percentile_threshold(counts, edges, 0)


def test_fp8_encoding_saturates_at_the_boundaries():
    e4m3 = fp8.encode(np.array([448, 449, 464, 465, 1e9, -465], np.float32), "e4m3")
    assert e4m3.tolist() == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE]
    e5m2 = fp8.decode(fp8.encode(np.array([61439, 61440, -1e9], np.float32), "e5m2"), "e5m2")
    assert e5m2.tolist() == [57344, 57344, -57344]


def test_a_spike_lowers_the_delayed_scale_for_exactly_window_steps():
    window, spike = 5, 3
    xs = np.ones((14, 4), np.float32)
    xs[spike] *= 100
    _, scales = fp8.delayed_scaling(xs, "e4m3", window=window)
    lowered = np.flatnonzero(scales[1:] < scales[spike]) + 1  # step 0 has scale 1: no history yet
    assert lowered.tolist() == list(range(spike + 1, spike + 1 + window))
    assert scales[0] == 1


def test_blockwise_refuses_a_block_that_does_not_tile():
    with pytest.raises(ValueError, match="block"):
        fp8.quantize_blockwise(np.ones((6, 10), np.float32), (4, 4))
