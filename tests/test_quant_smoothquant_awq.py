"""aisys.quant.smoothquant and aisys.quant.awq: the authors' formulas (their torch lines, restated here), the exact
equivalence of smoothing, the properties the exercises teach, and the argument checks."""

import numpy as np
import pytest
import torch

from aisys.quant import affine, awq
from aisys.quant import smoothquant as sq


def _layer(seed=0, tokens=32, channels=16, outs=(8, 8, 8), outliers=(2, 9)):
    rng = np.random.default_rng(seed)
    gain = 1 + 0.2 * rng.standard_normal(channels)
    gain[list(outliers)] = 50.0
    x_in = rng.standard_normal((tokens, channels))
    bias = 0.1 * rng.standard_normal(channels)
    weights = [0.1 * rng.standard_normal((out, channels)) for out in outs]
    return x_in, gain, bias, weights


# ---------------------------------------------------------------------------------------------------- SmoothQuant

@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.85, 1.0])
def test_scales_are_smooth_ln_fcs(alpha):
    x_in, gain, bias, weights = _layer()
    weights[1][:, 5] = 0.0  # a column of zeros in one layer only
    for w in weights:
        w[:, 6] = 0.0  # and in all of them: the 1e-5 clamp
    act = sq.act_max(sq.norm(x_in, gain, bias))
    act[4] = 0.0
    fcs = [torch.from_numpy(w) for w in weights]  # smoothquant/smooth.py, smooth_ln_fcs, line for line
    act_scales = torch.from_numpy(act)
    weight_scales = torch.cat([fc.abs().max(dim=0, keepdim=True)[0] for fc in fcs], dim=0)
    weight_scales = weight_scales.max(dim=0)[0].clamp(min=1e-5)
    scales = (act_scales.pow(alpha) / weight_scales.pow(1 - alpha)).clamp(min=1e-5)
    np.testing.assert_allclose(sq.smoothing_scales(act, weights, alpha), scales.numpy(), rtol=1e-12)


def test_smoothing_is_exact_and_moves_the_range():
    x_in, gain, bias, weights = _layer()
    for b in (bias, None):
        X = sq.norm(x_in, gain, b)
        s = sq.smoothing_scales(sq.act_max(X), weights, 0.5)
        smoothed = sq.smooth(gain, b, weights, s)
        X_s = sq.norm(x_in, smoothed.gain, smoothed.bias)
        for w, w_s in zip(weights, smoothed.weights):
            np.testing.assert_allclose(X_s @ w_s.T, X @ w.T, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(sq.act_max(X_s), sq.weight_max(smoothed.weights), rtol=1e-10)  # alpha 0.5
        assert sq.w8a8_error(X_s, smoothed.weights) < sq.w8a8_error(X, weights) / 2


def test_alpha_edges():
    x_in, gain, bias, weights = _layer()
    act = sq.act_max(sq.norm(x_in, gain, bias))
    np.testing.assert_allclose(act / sq.smoothing_scales(act, weights, 1.0), 1.0)
    np.testing.assert_allclose(sq.weight_max(weights) * sq.smoothing_scales(act, weights, 0.0), 1.0)


def test_smooth_and_quantize():
    x_in, gain, bias, weights = _layer()
    act = sq.act_max(sq.norm(x_in, gain, bias))
    result = sq.smooth_and_quantize(gain, weights, act, 0.5, bias=bias)
    s = sq.smoothing_scales(act, weights, 0.5)
    np.testing.assert_allclose(result.gain, gain / s)
    np.testing.assert_allclose(result.bias, bias / s)
    np.testing.assert_array_equal(result.scales, s)
    for w, w8 in zip(weights, result.weights):
        assert w8.dtype == np.float32 and w8.shape == w.shape
        np.testing.assert_array_equal(w8, affine.fake_quantize(w * s, granularity="channel"))
    assert sq.smooth_and_quantize(gain, weights, act).bias is None  # RMSNorm


def test_smoothquant_arguments_are_checked():
    x_in, gain, bias, weights = _layer()
    act = sq.act_max(sq.norm(x_in, gain, bias))
    with pytest.raises(ValueError, match="alpha must be a number in"):
        sq.smoothing_scales(act, weights, 1.5)
    with pytest.raises(ValueError, match=r"weights\[1\] must have 16 input channels"):
        sq.smoothing_scales(act, [weights[0], weights[1][:, :8]], 0.5)
    with pytest.raises(ValueError, match="act_max must be >= 0"):
        sq.smoothing_scales(-act, weights, 0.5)
    with pytest.raises(ValueError, match="weights must be a non-empty list"):
        sq.smoothing_scales(act, [], 0.5)
    with pytest.raises(ValueError, match="scales must be 16 numbers > 0"):
        sq.smooth(gain, bias, weights, np.zeros(16))
    with pytest.raises(ValueError, match="weight must have shape"):
        sq.w8a8_linear(x_in, weights[0][:, :4])


# ------------------------------------------------------------------------------------------------------------ AWQ

def _awq_layer(seed=0, out=16, channels=64, tokens=48, salient=(3, 40)):
    rng = np.random.default_rng(seed)
    weight = 0.05 * rng.standard_normal((out, channels))
    x = rng.standard_normal((tokens, channels))
    x[:, list(salient)] *= 20.0
    return weight, x


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.5, 0.95])
def test_grid_scales_are_llm_awq(ratio):
    _, x = _awq_layer()
    x[:, 7] = 0.0  # a dead channel: the 1e-4 clamp
    x_max = torch.from_numpy(x).abs().view(-1, x.shape[-1]).mean(0)  # auto_scale.py, get_act_scale
    scales = x_max.pow(ratio).clamp(min=1e-4).view(-1)  # _search_module_scale, line for line
    scales = scales / (scales.max() * scales.min()).sqrt()
    np.testing.assert_allclose(awq.grid_scales(awq.activation_scale(x), ratio), scales.numpy(), rtol=1e-12)


def test_search_starts_at_rtn_and_protects_salient_channels():
    weight, x = _awq_layer()
    search = awq.search_scale(weight, x, group_size=32)
    rtn = awq.output_error(x, weight, awq.rtn(weight, group_size=32))
    assert search.errors.shape == (awq.N_GRID,) and search.errors[0] == rtn
    assert search.errors.min() < rtn / 2 and 0 < search.ratio < 1
    assert search.errors[round(search.ratio * awq.N_GRID)] == search.errors.min()
    assert (search.scales[[3, 40]] > 1).all() and np.delete(search.scales, [3, 40]).max() < 1
    quantized = awq.awq_quantize(weight, x, group_size=32)
    assert quantized.dtype == np.float32 and quantized.shape == weight.shape
    np.testing.assert_array_equal(quantized, awq.quantize_scaled(weight, search.scales, group_size=32)
                                  .astype(np.float32))


def test_ties_go_to_the_first_ratio_and_dead_channels_stay_finite():
    weight, _ = _awq_layer()
    flat = np.where(np.random.default_rng(1).random((8, 64)) < 0.5, -2.0, 2.0)  # every mean |x| is 2: s = 1
    search = awq.search_scale(weight, flat, group_size=32)
    assert search.ratio == 0 and np.ptp(search.errors) == 0 and (search.scales == 1).all()
    _, x = _awq_layer()
    x[:, 5] = 0.0
    search = awq.search_scale(weight, x, group_size=32)
    assert np.isfinite(search.scales).all() and np.isfinite(search.errors).all()
    assert np.isfinite(awq.awq_quantize(weight, x, group_size=32)).all()


def test_awq_arguments_are_checked():
    weight, x = _awq_layer()
    with pytest.raises(ValueError, match=r"x must have shape \(tokens, 64\)"):
        awq.search_scale(weight, x[:, :32])
    with pytest.raises(ValueError, match="group_size 48 must divide"):
        awq.awq_quantize(weight, x, group_size=48)
    with pytest.raises(ValueError, match="ratio must be a number in"):
        awq.grid_scales(awq.activation_scale(x), 1.5)
    with pytest.raises(ValueError, match="scales must be 64 numbers > 0"):
        awq.quantize_scaled(weight, np.ones(3))
