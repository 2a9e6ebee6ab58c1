"""aisys.interview.normalization, the answer key of the LayerNorm drills: against torch's LayerNorm and autograd in
float64, and Newton's square root against the true one."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aisys.interview.normalization import layer_norm, layer_norm_backward, layer_norm_newton, sqrt_newton


def _rows(seed, m, n):
    rng = np.random.default_rng(seed)
    x = 3 * rng.standard_normal((m, n)) + rng.uniform(-5, 5, (m, 1))
    if m > 1:
        x[0] = 1.5  # a constant row
    return x, 1 + 0.5 * rng.standard_normal(n), 0.5 * rng.standard_normal(n), rng.standard_normal((m, n))


@pytest.mark.parametrize("m, n", [(4, 7), (3, 1), (1, 5), (0, 3)])
def test_layer_norm_and_its_gradients_are_torchs(m, n):
    x, gamma, beta, dy = _rows(m * 10 + n, m, n)
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
    y = F.layer_norm(tensors[0], (n,), tensors[1], tensors[2], 1e-5)
    y.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(layer_norm(x, gamma, beta, 1e-5), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(layer_norm_backward(x, gamma, dy, 1e-5), tensors, strict=True):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_layer_norm_keeps_float32_and_survives_a_large_mean():
    rng = np.random.default_rng(0)
    x = (1e4 + 1e-2 * rng.standard_normal((4, 100))).astype(np.float32)
    y = layer_norm(x, np.ones(100, np.float32), np.zeros(100, np.float32))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.std(axis=1), 1 / np.sqrt(1 + 1e-5 / x.astype(np.float64).var(axis=1)), rtol=1e-5)


def test_newton_takes_exactly_the_steps_asked_and_converges_to_the_square_root():
    x = np.array([1e-8, 0.25, 1.0, 100.0, 1e12])
    assert sqrt_newton(x, 0).tolist() == ((1 + x) / 2).tolist()
    y1 = (50.5 + 100 / 50.5) / 2  # one step from y0 = (1 + 100) / 2
    assert sqrt_newton(np.array([100.0]), 2)[0] == (y1 + 100 / y1) / 2
    steps = [sqrt_newton(x, k) for k in range(80)]
    assert all((a >= b).all() and (b >= np.sqrt(x) * (1 - 1e-15)).all() for a, b in zip(steps, steps[1:]))
    np.testing.assert_allclose(steps[-1], np.sqrt(x), rtol=1e-15)
    with pytest.raises(ValueError, match="x must"):
        sqrt_newton(np.array([1.0, 0.0]), 3)
    with pytest.raises(ValueError, match="iterations"):
        sqrt_newton(np.array([1.0]), -1)


def test_layer_norm_newton_is_layer_norm_once_converged_and_not_before():
    x, gamma, beta, _ = _rows(5, 4, 8)
    exact = layer_norm(x, gamma, beta, 1e-5)
    np.testing.assert_allclose(layer_norm_newton(x, gamma, beta, 1e-5, 60), exact, rtol=1e-12, atol=1e-12)
    assert not np.allclose(layer_norm_newton(x, gamma, beta, 1e-5, 2), exact, rtol=1e-3)
