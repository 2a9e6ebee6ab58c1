"""aisys.autograd.backward against torch.autograd in float64, always with random upstream gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aisys.autograd import backward as bw
from aisys.conv import im2col

RNG = np.random.default_rng(0)


def _grads(forward, inputs, dy):
    """torch's gradients of <dy, forward(*inputs)> with respect to every input, as numpy."""
    tensors = [torch.tensor(a, requires_grad=True) for a in inputs]
    out = forward(*tensors)
    grads = torch.autograd.grad(out, tensors, torch.as_tensor(dy, dtype=torch.float64))
    return out.detach().numpy(), [g.numpy() for g in grads]


def _close(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)  # float64 both ways: rounding only


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_softmax(scale):
    x = RNG.standard_normal((3, 4, 5)) * scale
    dy = RNG.standard_normal(x.shape)
    y, (dx,) = _grads(lambda t: torch.softmax(t, -1), [x], dy)
    _close(bw.softmax(x), y)
    _close(bw.softmax_backward(x, dy), dx)


def test_softmax_diagonal_only_is_wrong_unless_upstream_is_constant():
    x, dy = RNG.standard_normal((2, 5)), RNG.standard_normal((2, 5))
    s = bw.softmax(x)
    assert not np.allclose(dy * s * (1 - s), bw.softmax_backward(x, dy))
    assert np.allclose(bw.softmax_backward(x, np.ones_like(x)), 0)  # a softmax's outputs sum to 1 whatever x is


@pytest.mark.parametrize("targets", [[0, 3, -100, 2, 1], [-100, 4, -100, -100, 0], [-100] * 5])
@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_cross_entropy(targets, scale):
    logits, targets = RNG.standard_normal((5, 6)) * scale, np.array(targets)
    dloss = float(RNG.standard_normal())
    loss, (dlogits,) = _grads(lambda t: F.cross_entropy(t, torch.tensor(targets), ignore_index=-100), [logits], dloss)
    np.testing.assert_allclose(bw.cross_entropy(logits, targets), loss, rtol=1e-12)  # nan == nan here
    got = bw.cross_entropy_backward(logits, targets, dloss)
    _close(got, dlogits)
    assert (got[targets == -100] == 0).all()


def test_layer_norm():
    x, gamma, beta = RNG.standard_normal((4, 7)), RNG.standard_normal(7), RNG.standard_normal(7)
    dy = RNG.standard_normal(x.shape)
    y, (dx, dgamma, dbeta) = _grads(lambda a, g, b: F.layer_norm(a, (7,), g, b, 1e-5), [x, gamma, beta], dy)
    _close(bw.layer_norm(x, gamma, beta), y)
    for got, expected in zip(bw.layer_norm_backward(x, gamma, dy), (dx, dgamma, dbeta), strict=True):
        _close(got, expected)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 3)), ((4, 2), (6, 2), (6, 5))])
def test_attention(causal, shape):
    q, k, v = (RNG.standard_normal(s) for s in shape)
    dy = RNG.standard_normal(shape[0][:-1] + shape[2][-1:])
    y, grads = _grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal), [q, k, v], dy)
    _close(bw.attention(q, k, v, causal), y)
    for got, expected in zip(bw.attention_backward(q, k, v, dy, causal), grads, strict=True):
        _close(got, expected)


def test_col2im_is_the_adjoint_of_im2col():
    x, shape = RNG.standard_normal((2, 3, 6, 5)), (2, 3, 6, 5)
    columns = RNG.standard_normal(im2col(x, (3, 2), 2, 1).shape)
    assert np.isclose((im2col(x, (3, 2), 2, 1) * columns).sum(), (x * bw.col2im(columns, shape, (3, 2), 2, 1)).sum())


@pytest.mark.parametrize("stride, padding", [(1, 0), (2, 1), (3, 2)])
def test_conv2d(stride, padding):
    x, w, b = RNG.standard_normal((2, 3, 7, 6)), RNG.standard_normal((4, 3, 3, 2)), RNG.standard_normal(4)
    dy = RNG.standard_normal(bw.conv2d(x, w, b, stride, padding).shape)
    y, grads = _grads(lambda a, c, d: F.conv2d(a, c, d, stride, padding), [x, w, b], dy)
    _close(bw.conv2d(x, w, b, stride, padding), y)
    for got, expected in zip(bw.conv2d_backward(x, w, dy, stride, padding), grads, strict=True):
        _close(got, expected)


@pytest.mark.parametrize("kernel, stride, padding", [(2, None, 0), (3, 1, 1), (3, 2, 0)])
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool(kernel, stride, padding, ties):
    x = RNG.integers(0, 3, (2, 2, 7, 7)).astype(float) if ties else RNG.standard_normal((2, 2, 7, 7))
    out = bw.max_pool2d(x, kernel, stride, padding)
    dy = RNG.standard_normal(out.shape)
    y, (dx,) = _grads(lambda t: F.max_pool2d(t, kernel, stride, padding), [x], dy)
    _close(out, y)
    _close(bw.max_pool2d_backward(x, dy, kernel, stride, padding), dx)


@pytest.mark.parametrize("kernel, stride, padding", [(2, None, 0), (3, 1, 1), (3, 2, 1)])
def test_avg_pool(kernel, stride, padding):
    x = RNG.standard_normal((2, 2, 7, 6))
    out = bw.avg_pool2d(x, kernel, stride, padding)
    dy = RNG.standard_normal(out.shape)
    y, (dx,) = _grads(lambda t: F.avg_pool2d(t, kernel, stride, padding, count_include_pad=False), [x], dy)
    _close(out, y)
    _close(bw.avg_pool2d_backward(x, dy, kernel, stride, padding), dx)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 4, 3)])
def test_batch_norm(training, shape):
    x = RNG.standard_normal(shape) * 2 + 1
    C = shape[1]
    gamma, beta = RNG.standard_normal(C), RNG.standard_normal(C)
    mean, var = RNG.standard_normal(C), RNG.uniform(0.5, 2, C)
    dy = RNG.standard_normal(shape)

    def forward(a, g, b):  # torch updates the running statistics in place in training: give it copies
        return F.batch_norm(a, torch.tensor(mean), torch.tensor(var), g, b, training, 0.1, 1e-5)

    y, grads = _grads(forward, [x, gamma, beta], dy)
    running = (None, None) if training else (mean, var)
    _close(bw.batch_norm(x, *running, gamma, beta, training), y)
    for got, expected in zip(bw.batch_norm_backward(x, *running, gamma, dy, training), grads, strict=True):
        _close(got, expected)


def test_validation_names_the_argument():
    x = RNG.standard_normal((2, 3))
    with pytest.raises(ValueError, match="dy"):
        bw.softmax_backward(x, np.ones((3, 2)))
    with pytest.raises(ValueError, match="targets"):
        bw.cross_entropy_backward(x, np.array([0, 3]))
    with pytest.raises(ValueError, match="dloss"):
        bw.cross_entropy_backward(x, np.array([0, 1]), float("nan"))
    with pytest.raises(ValueError, match="causal"):
        bw.attention_backward(x, x, x, x, causal="yes")
    with pytest.raises(ValueError, match="w must be"):
        bw.conv2d_backward(np.ones((1, 2, 4, 4)), np.ones((1, 3, 2, 2)), np.ones((1, 1, 3, 3)))
    with pytest.raises(ValueError, match="padding"):
        bw.max_pool2d_backward(np.ones((1, 1, 4, 4)), np.ones((1, 1, 2, 2)), 2, 2, 2)
    with pytest.raises(ValueError, match="running_mean"):
        bw.batch_norm_backward(x, None, None, np.ones(3), x, training=False)
    with pytest.raises(ValueError, match="more than one value"):
        bw.batch_norm_backward(x[:1], None, None, np.ones(3), x[:1], training=True)
