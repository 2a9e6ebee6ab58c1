"""aisys.parallel.loss_scaling is torch.amp.GradScaler's rule: the update against torch._amp_update_scale_, the
unscale against torch._amp_foreach_non_finite_check_and_unscale_, and the fp16 model overflows and underflows."""

import numpy as np
import pytest
import torch

from aisys.parallel import fp16_model
from aisys.parallel import loss_scaling as ls


def torch_update(scaler, found_inf):
    scale = torch.full((), scaler["scale"], dtype=torch.float32)
    tracker = torch.full((), scaler["growth_tracker"], dtype=torch.int32)
    torch._amp_update_scale_(scale, tracker, torch.full((), float(found_inf)), scaler["growth_factor"],
                             scaler["backoff_factor"], scaler["growth_interval"])
    return scale.item(), int(tracker.item())


@pytest.mark.parametrize("seed", range(4))
def test_update_is_torchs(seed):
    rng = np.random.default_rng(seed)
    scaler = ls.new_scaler(float(2.0 ** rng.integers(0, 127)), growth_factor=float(rng.uniform(1.01, 4)),
                           backoff_factor=float(rng.uniform(0.1, 0.9)), growth_interval=int(rng.integers(1, 5)))
    for flag in rng.random(200) < 0.3:
        expected = torch_update(scaler, bool(flag))
        scaler = ls.update_scale(scaler, bool(flag))
        assert (scaler["scale"], scaler["growth_tracker"]) == expected


def test_growth_stops_at_float32s_range():
    scaler = ls.new_scaler(2.0 ** 127, growth_interval=1)
    after = ls.update_scale(scaler, False)
    assert after["scale"] == 2.0 ** 127 and after["growth_tracker"] == 0
    assert (after["scale"], after["growth_tracker"]) == torch_update(scaler, False)


def test_unscale_is_torchs():
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((3, 4)).astype(np.float32) * 1e4, rng.standard_normal(5).astype(np.float32)]
    grads[1][2] = np.nan
    scale = float(np.float32(3 * 2.0 ** 12))
    tensors = [torch.from_numpy(g.copy()) for g in grads]
    found = torch.zeros(())
    inv = torch.full((), scale, dtype=torch.float32).double().reciprocal().float()
    torch._amp_foreach_non_finite_check_and_unscale_(tensors, found, inv)
    unscaled, found_inf = ls.unscale(grads, scale)
    assert found_inf and found.item() == 1.0
    for u, t in zip(unscaled, tensors):
        np.testing.assert_array_equal(u, t.numpy())


def test_step_skips_and_backs_off():
    w = [np.ones(3, np.float32)]
    params, scaler, skipped = ls.step(w, [np.array([1, np.inf, 0], np.float16)], ls.new_scaler(growth_interval=3), 0.1)
    assert skipped and params[0] is not w[0] and np.array_equal(params[0], w[0])
    assert scaler["scale"] == 2.0 ** 15 and scaler["growth_tracker"] == 0


@pytest.mark.parametrize("bad, name", [({"scale": 1.0}, "scaler"), (0, "found_inf")])
def test_update_refuses(bad, name):
    scaler, flag = (bad, False) if name == "scaler" else (ls.new_scaler(), bad)
    with pytest.raises(ValueError, match=name):
        ls.update_scale(scaler, flag)


@pytest.mark.parametrize("kwargs, name", [({"growth_factor": 1.0}, "growth_factor"),
                                          ({"backoff_factor": 1.0}, "backoff_factor"),
                                          ({"growth_interval": 0}, "growth_interval"),
                                          ({"init_scale": 0}, "init_scale")])
def test_new_scaler_refuses(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ls.new_scaler(**kwargs)


def test_the_model_overflows_at_2_16_and_underflows_without_a_scale():
    model = fp16_model.build(0)
    _, first = fp16_model.loss_and_grads(model, model["w"], 2.0 ** 16)
    assert not np.isfinite(first).all()  # the initial scale overflows
    scaled = fp16_model.train(model, 40, 2.0, ls.new_scaler(growth_interval=1), ls.step)
    plain = fp16_model.train(model, 40, 2.0)
    assert scaled["skipped"][:4] == [True] * 4 and not any(scaled["skipped"][4:20])
    assert plain["zero_grads"][-1] == 1.0  # without a scale every gradient flushes to zero
    assert scaled["losses"][-1] < plain["losses"][-1] / 10
