"""aisys.quant.qat, compress and model: the straight-through estimator agrees with torch's fake quantization, LSQ's
gradient is eq. 3, the compression helpers count and compute what their docstrings say, and the measurement
harness runs a method on the model (untrained here: training is the book's job, tens of seconds)."""

import math

import numpy as np
import pytest
import torch

from aisys.inference.kv_cache import kv_cache_bytes
from aisys.inference.model import LLAMA_3_8B
from aisys.quant import affine, compress, qat


@pytest.mark.parametrize("bits, symmetric, zero_point", [(4, True, 0), (4, False, 3), (8, False, -128), (2, True, 0)])
def test_ste_matches_torch_where_the_conventions_agree(bits, symmetric, zero_point):
    qmin, qmax = affine.int_range(bits, symmetric)
    scale = 0.25  # a power of two: torch's x * (1 / scale) in float32 equals x / scale in float64
    ratios = np.concatenate([np.arange(qmin - 2, qmax + 2.5, 0.5), np.random.default_rng(0).uniform(-300, 300, 50)])
    x = torch.tensor((ratios - zero_point) * scale, dtype=torch.float32, requires_grad=True)
    grad = torch.rand(x.shape, generator=torch.Generator().manual_seed(1))
    ours = qat.fake_quantize(x, torch.tensor(scale), torch.tensor(zero_point), bits, symmetric)
    ours.backward(grad)
    ours_grad, x.grad = x.grad.clone(), None
    theirs = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, qmin, qmax)
    theirs.backward(grad)
    assert torch.equal(ours, theirs) and torch.equal(ours_grad, x.grad)


def test_forward_is_affines_fake_quantization():
    w = np.random.default_rng(2).standard_normal((6, 16)).astype(np.float32)
    scale, zero_point = affine.choose_qparams(w, bits=4, granularity="channel")
    got = qat.fake_quantize_arrays(w, scale, zero_point, bits=4)
    assert np.array_equal(got, affine.fake_quantize(w, bits=4, granularity="channel"))
    assert np.array_equal(qat.fake_quantize_weight(torch.from_numpy(w), 4).detach().numpy(), got)


def test_fake_quantize_refuses_nan_and_bad_scales():
    with pytest.raises(ValueError, match="x"):
        qat.fake_quantize(torch.tensor([1.0, float("nan")]), torch.tensor(1.0), torch.tensor(0))
    with pytest.raises(ValueError, match="scale"):
        qat.fake_quantize(torch.tensor([1.0]), torch.tensor(0.0), torch.tensor(0))


def test_lsq_step_gradient_is_eq_3_times_g():
    v = [2.3, -1.2, 9.5, -8.0]
    expected = ((2 - 2.3) + (-1 + 1.2) + 7 - 7) / math.sqrt(len(v) * 7)
    assert qat.lsq_step_gradient(v, 1.0, 4, [1.0] * len(v)) == pytest.approx(expected, rel=1e-6)


def test_qat_beats_ptq_on_the_exercise_dataset():
    data = qat.mlp_dataset(3)
    weights = qat.mlp_train(qat.mlp_init(3), data["x_train"], data["y_train"], steps=300, lr=1e-2)
    tuned = qat.mlp_train(weights, data["x_train"], data["y_train"], steps=100, lr=3e-3, bits=4)
    test = data["x_test"], data["y_test"]
    assert qat.mlp_accuracy(tuned, *test, bits=4) >= qat.mlp_accuracy(weights, *test, bits=4) + 0.04


def test_kv_cache_bytes():
    elements = compress.kv_cache_elements(LLAMA_3_8B, 100, 2)
    assert elements * 2 == kv_cache_bytes(LLAMA_3_8B, 100, 2, "bf16")
    assert compress.quantized_kv_cache_bytes(LLAMA_3_8B, 100, 2, 4, 128) == elements / 2 + elements / 128 * 4


def test_kv_axes_and_pruning_and_distillation():
    x = np.random.default_rng(3).standard_normal((32, 8)).astype(np.float32)
    assert np.array_equal(compress.quantize_kv(x, 4, "channel")[:, 2],
                          affine.fake_quantize(x[:, 2], bits=4, symmetric=False))
    assert np.array_equal(compress.quantize_kv(x, 4, "token")[5], affine.fake_quantize(x[5], bits=4, symmetric=False))
    W = np.diag([1.0, 5.0, 3.0])
    assert np.array_equal(compress.prune_channels(W, 2), W[[1, 2]])
    student, teacher = np.array([1.0, 0.0, -1.0]), np.array([2.0, 1.0, 0.0])
    loss = lambda z: compress.distillation_loss(z, teacher, 3.0)  # noqa: E731
    numeric = [(loss(student + h) - loss(student - h)) / 2e-6 for h in np.eye(3) * 1e-6]
    assert np.allclose(compress.distillation_gradient(student, teacher, 3.0), numeric, atol=1e-6)
    assert compress.distillation_loss(teacher, teacher, 2.0) == pytest.approx(0.0, abs=1e-12)


def test_measure_methods_on_an_untrained_model():
    from aisys.quant import model as qm
    torch.manual_seed(0)
    untrained = qm.CharTransformer().eval()
    rows = qm.measure_methods(untrained, [qm.standard_methods()[0], qm.standard_methods()[4]])
    assert rows[0]["worst_error"] == 0 and rows[0]["bytes"] == 4 * sum(
        m.weight.numel() for m in untrained.linears().values())
    assert 0 < rows[1]["worst_error"] < 0.2 and rows[1]["bytes"] < rows[0]["bytes"] / 7
    assert rows[0]["perplexity"] == pytest.approx(qm.perplexity(untrained))
