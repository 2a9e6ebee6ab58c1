"""aisys.interview.softmax, the answer key of the softmax, online softmax and cross-entropy drills: against torch
in float64, and against the recurrence it does not use."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aisys.interview.softmax import cross_entropy, online_softmax_stats, softmax


def test_softmax_is_torchs_in_float64_rounded_to_float32_even_for_extreme_rows():
    big = np.finfo(np.float32).max
    x = np.array([[big, big, -big], [-1e4, -1e4 + 1, -np.inf], [1.0, 2.0, 3.0]], dtype=np.float32)
    y = softmax(x)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    np.testing.assert_array_equal(y, torch.softmax(torch.from_numpy(x).double(), -1).float().numpy())
    assert y[1, 2] == 0


@pytest.mark.parametrize("x, error", [(np.ones(3), "float32"), (np.zeros((2, 0), np.float32), "last axis"),
                                      (np.array([1.0, np.nan], np.float32), "NaN"),
                                      (np.array([[0.0, -np.inf], [-np.inf, -np.inf]], np.float32), "finite")])
def test_softmax_refuses_what_it_has_no_answer_for(x, error):
    with pytest.raises(ValueError, match=error):
        softmax(x)


def test_online_statistics_are_those_the_recurrence_keeps():
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal(int(n)) * 5 for n in rng.integers(0, 6, 12)]
    m, d = online_softmax_stats(chunks)
    state, seen = (-np.inf, 0.0), 0
    for i, chunk in enumerate(chunks):
        if len(chunk):
            new = max(state[0], chunk.max())
            state = (new, state[1] * np.exp(state[0] - new) + np.exp(chunk - new).sum())
        seen += len(chunk)
        assert m[i] == state[0] and d[i] == pytest.approx(state[1], rel=1e-12, abs=0)
        if seen:
            x = np.concatenate(chunks[:i + 1])
            assert m[i] + np.log(d[i]) == pytest.approx(torch.logsumexp(torch.from_numpy(x), 0).item(), rel=1e-12)


def test_online_statistics_of_nothing_yet_are_minus_inf_and_zero():
    m, d = online_softmax_stats([np.zeros(0), np.array([2.0]), np.zeros(0)])
    assert m.tolist() == [-np.inf, 2.0, 2.0] and d.tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"chunks\[1\]"):
        online_softmax_stats([np.ones(2), np.ones((2, 2))])


@pytest.mark.parametrize("ignore_index", [-100, 0, 2])
def test_cross_entropy_is_torchs(ignore_index):
    rng = np.random.default_rng(ignore_index + 100)
    logits = (rng.standard_normal((20, 5)) * 30 + rng.choice([0, 1e4], (20, 1))).astype(np.float32)
    targets = rng.integers(0, 5, 20)
    targets[::3] = ignore_index
    expected = F.cross_entropy(torch.from_numpy(logits).double(), torch.from_numpy(targets),
                               ignore_index=ignore_index).item()
    assert cross_entropy(logits, targets, ignore_index) == pytest.approx(expected, rel=1e-12)


def test_cross_entropy_over_no_row_is_nan_as_torchs():
    logits, targets = np.ones((3, 4), np.float32), np.full(3, -100)
    assert np.isnan(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets)).item())
    assert np.isnan(cross_entropy(logits, targets)) and np.isnan(cross_entropy(np.ones((0, 4)), np.zeros(0, int)))
    assert cross_entropy(np.array([[-1e3, 0.0]], np.float32), np.array([0])) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="targets"):
        cross_entropy(logits, np.array([0, 4, 1]))
