"""Quantization-aware training: fake quantization with the straight-through estimator, LSQ, and a small QAT loop.

Fake quantization rounds a tensor to its quantized values and keeps it in float32, so that training sees the
error the quantized model will have: `fake_quantize(x) = (clamp(round(x / scale) + zero_point, qmin, qmax) -
zero_point) * scale`, with `aisys.quant.affine`'s conventions (codes in [qmin, qmax] from `affine.int_range`,
x / scale in float64 rounded half to even, the product (code - zero_point) * scale in float32). Its true
derivative is 0 almost everywhere (round is a staircase), so nothing would train. The straight-through estimator
(Bengio, Léonard & Courville 2013, arXiv 1308.3432; used for QAT by Jacob et al. 2018, arXiv 1712.05877) passes
the gradient through the rounding as if it were the identity, and stops it where the clamp bites:

    d fake_quantize(x) / dx = 1 where qmin <= round(x / scale) + zero_point <= qmax, else 0,

the rule of `torch.fake_quantize_per_tensor_affine` (its mask compares the *rounded* code with the range, both
ends included: with codes [-7, 7] and scale 1, x = 7.4 passes (code 7) and x = 7.5 does not (code 8)).

LSQ (Esser et al. 2020, "Learned Step Size Quantization", arXiv 1902.08153) also learns the scale ("step size"
s): v_hat = round(clamp(v / s, -Q_N, Q_P)) * s, and by its eq. 3

    d v_hat / d s = -v/s + round(v/s)  if -Q_N < v/s < Q_P;   -Q_N if v/s <= -Q_N;   Q_P if v/s >= Q_P,

scaled by g = 1 / sqrt(N * Q_P) (N the number of weights the step size covers) so that the step size learns at
the pace of the weights. The data gradient is the straight-through estimator's: 1 where -Q_N < v/s < Q_P, else 0.
"""

import contextlib
import math

import numpy as np
import torch

from .._validate import positive_int
from . import affine


# ---------------------------------------------------------------------------------------------------------------
# Fake quantization with the straight-through estimator


class FakeQuantizeSTE(torch.autograd.Function):
    """(clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale; backward: the clamp's mask."""

    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin: int, qmax: int):
        codes = torch.round(x.double() / scale.double()) + zero_point.double()  # float64, half to even
        inside = (codes >= qmin) & (codes <= qmax)  # both ends included, on the rounded code
        ctx.save_for_backward(inside)
        return (codes.clamp(qmin, qmax) - zero_point.double()).float() * scale.float()

    @staticmethod
    def backward(ctx, grad_output):
        (inside,) = ctx.saved_tensors
        return grad_output * inside.to(grad_output.dtype), None, None, None, None  # round is passed straight


def _params(x: torch.Tensor, scale, zero_point, bits: int, symmetric: bool):
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise ValueError(f"x must be a float32 tensor, got {type(x).__name__} {getattr(x, 'dtype', '')}")
    if not torch.isfinite(x).all():
        raise ValueError("x must hold finite values (no NaN or inf)")
    qmin, qmax = affine.int_range(bits, symmetric)
    scale = torch.as_tensor(scale, dtype=torch.float32)
    zero_point = torch.as_tensor(zero_point)
    if not (torch.isfinite(scale) & (scale > 0)).all():
        raise ValueError("scale must hold finite float32 values > 0")
    if zero_point.dtype.is_floating_point or ((zero_point < qmin) | (zero_point > qmax)).any():
        raise ValueError(f"zero_point must hold integers in [{qmin}, {qmax}], got {zero_point.dtype}")
    try:
        torch.broadcast_shapes(scale.shape, zero_point.shape, x.shape)
    except RuntimeError:
        raise ValueError(f"scale {tuple(scale.shape)} and zero_point {tuple(zero_point.shape)} must broadcast "
                         f"against x {tuple(x.shape)}") from None
    return scale, zero_point, qmin, qmax


def fake_quantize(x: torch.Tensor, scale, zero_point, bits: int = 4, symmetric: bool = True) -> torch.Tensor:
    """x fake-quantized (float32, x's shape) with a straight-through gradient; scale and zero_point broadcast."""
    scale, zero_point, qmin, qmax = _params(x, scale, zero_point, bits, symmetric)
    return FakeQuantizeSTE.apply(x, scale, zero_point, qmin, qmax)


def fake_quantize_arrays(x, scale, zero_point, bits: int = 4, symmetric: bool = True) -> np.ndarray:
    """`fake_quantize` on numpy arrays (float32 x, float32 scale, integer zero_point): the float32 result."""
    x = torch.from_numpy(np.array(x, dtype=np.float32))
    return fake_quantize(x, np.asarray(scale, np.float32), np.asarray(zero_point, np.int64), bits, symmetric).numpy()


def fake_quantize_backward(x, scale, zero_point, bits: int, symmetric: bool, grad_output) -> np.ndarray:
    """The gradient reaching x (float32) when `grad_output` flows back through `fake_quantize`."""
    x = torch.tensor(np.array(x, dtype=np.float32), requires_grad=True)
    out = fake_quantize(x, np.asarray(scale, np.float32), np.asarray(zero_point, np.int64), bits, symmetric)
    out.backward(torch.from_numpy(np.array(grad_output, dtype=np.float32)))
    return x.grad.numpy()


def weight_scale(weight: torch.Tensor, bits: int = 4, granularity: str = "channel") -> torch.Tensor:
    """The symmetric scale of `affine.choose_qparams` in torch, from the weight's values without a gradient:
    max|w| / qmax per output channel (shape (out, 1)) or per tensor (shape ()), float32, at least 2**-126."""
    _, qmax = affine.int_range(bits, True)
    w = weight.detach().double().abs()
    peak = w.amax(dim=tuple(range(1, w.ndim)), keepdim=True) if granularity == "channel" else w.amax()
    return (peak / qmax).float().clamp_min(affine.SMALLEST_SCALE)


def fake_quantize_weight(weight: torch.Tensor, bits: int = 4, granularity: str = "channel") -> torch.Tensor:
    """The weight as round-to-nearest symmetric quantization would store it, with a straight-through gradient."""
    scale = weight_scale(weight, bits, granularity)
    return fake_quantize(weight, scale, torch.zeros(scale.shape, dtype=torch.int32), bits, True)


# ---------------------------------------------------------------------------------------------------------------
# LSQ: a learned step size


class LSQQuantize(torch.autograd.Function):
    """round(clamp(v / s, -Q_N, Q_P)) * s with LSQ's gradients (Esser et al. 2020, eq. 3) for v and s."""

    @staticmethod
    def forward(ctx, v, step, qn: int, qp: int, grad_scale: float):
        ratio = v / step
        ctx.save_for_backward(ratio)
        ctx.qn, ctx.qp, ctx.grad_scale, ctx.step_shape = qn, qp, grad_scale, step.shape
        return torch.round(ratio.clamp(-qn, qp)) * step

    @staticmethod
    def backward(ctx, grad_output):
        (ratio,) = ctx.saved_tensors
        below, above = ratio <= -ctx.qn, ratio >= ctx.qp
        inside = ~(below | above)
        d_step = torch.where(inside, torch.round(ratio) - ratio, torch.where(below, -float(ctx.qn), float(ctx.qp)))
        grad_step = (grad_output * d_step).sum() * ctx.grad_scale
        return grad_output * inside.to(grad_output.dtype), grad_step.reshape(ctx.step_shape), None, None, None


def lsq_grad_scale(count: int, bits: int) -> float:
    """LSQ's g = 1 / sqrt(N * Q_P) for a step size covering `count` values at `bits` (Q_P = 2**(bits-1) - 1)."""
    _, qp = affine.int_range(bits, True)
    return 1.0 / math.sqrt(positive_int("count", count) * qp)


def lsq_quantize(v: torch.Tensor, step: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """LSQ's quantizer of v with a learnable scalar step size (symmetric codes [-Q_P, Q_P])."""
    qn = qp = affine.int_range(bits, True)[1]
    return LSQQuantize.apply(v, step, qn, qp, lsq_grad_scale(v.numel(), bits))


def lsq_arrays(v, step: float, bits: int, grad_output) -> list:
    """[v_hat, dL/dv, dL/ds] (float32 arrays, the last of shape ()) of LSQ on numpy values, given dL/dv_hat."""
    v = torch.tensor(np.array(v, dtype=np.float32), requires_grad=True)
    if not torch.isfinite(v).all():
        raise ValueError("v must hold finite values")
    s = torch.tensor(float(step), dtype=torch.float32, requires_grad=True)
    out = lsq_quantize(v, s, bits)
    out.backward(torch.tensor(np.array(grad_output, dtype=np.float32)))
    return [out.detach().numpy(), v.grad.numpy(), s.grad.numpy()]


def lsq_step_gradient(v, step: float, bits: int, grad_output) -> float:
    """dL/ds of LSQ (eq. 3 times g) for values v, a step size and dL/dv_hat: a float."""
    v = torch.tensor(np.array(v, dtype=np.float32))
    s = torch.tensor(float(step), dtype=torch.float32, requires_grad=True)
    lsq_quantize(v, s, bits).backward(torch.tensor(np.array(grad_output, dtype=np.float32)))
    return float(s.grad)


# ---------------------------------------------------------------------------------------------------------------
# A small QAT experiment: an MLP on generated data, quantized to 4 bits per tensor


MLP_SIZES = (8, 64, 64, 4)  # input features, two hidden layers, classes


FEATURE_SCALES = 2.0 ** torch.linspace(0, 4, MLP_SIZES[0])


def mlp_dataset(seed: int = 0, train: int = 1024, test: int = 2048) -> dict:
    """Points in 8-D labelled by a random teacher network (argmax of 4 outputs), float32 inputs, int64 labels."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(train + test, MLP_SIZES[0], generator=g)
    hidden = torch.tanh(x @ torch.randn(MLP_SIZES[0], 32, generator=g))
    labels = (hidden @ torch.randn(32, MLP_SIZES[-1], generator=g)).argmax(dim=1)
    x = x * FEATURE_SCALES  # the features the teacher weighs alike come at scales 1 to 16
    return {"x_train": x[:train].numpy(), "y_train": labels[:train].numpy(),
            "x_test": x[train:].numpy(), "y_test": labels[train:].numpy()}


def mlp_init(seed: int = 0) -> list[np.ndarray]:
    """The MLP's weight matrices (out, in), no biases, float32, scaled by 1 / sqrt(in)."""
    g = torch.Generator().manual_seed(seed + 1)
    return [(torch.randn(n_out, n_in, generator=g) / math.sqrt(n_in)).numpy()
            for n_in, n_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]


def mlp_forward(weights, x: torch.Tensor, quantize=None) -> torch.Tensor:
    """Logits of the MLP (ReLU between layers); `quantize` maps each weight to what the layer multiplies by."""
    for i, w in enumerate(weights):
        x = x @ (quantize(w) if quantize else w).T
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x


@contextlib.contextmanager
def one_thread():
    """One thread and deterministic algorithms for the duration, then the caller's settings back (small tensors:
    one thread is as fast, and the result does not depend on the machine's core count)."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def mlp_train(weights, x, y, *, steps: int, lr: float, bits: int | None = None) -> list[np.ndarray]:
    """Full-batch Adam on the cross-entropy; with `bits`, every weight fake-quantized per tensor (QAT)."""
    with one_thread():
        return _mlp_train(weights, x, y, steps, lr, bits)


def _mlp_train(weights, x, y, steps, lr, bits):
    params = [torch.tensor(np.array(w, dtype=np.float32), requires_grad=True) for w in weights]
    x, y = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.int64))
    optimizer = torch.optim.Adam(params, lr=lr)
    quantize = None if bits is None else (lambda w: fake_quantize_weight(w, bits, "tensor"))
    for _ in range(positive_int("steps", steps)):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(mlp_forward(params, x, quantize), y).backward()
        optimizer.step()
    return [p.detach().numpy() for p in params]


def mlp_accuracy(weights, x, y, bits: int | None = None) -> float:
    """Accuracy of the MLP, its weights rounded to `bits` per tensor (round to nearest) if `bits` is given."""
    ws = [torch.from_numpy(np.asarray(w, np.float32)) for w in weights]
    if bits is not None:
        ws = [torch.from_numpy(affine.fake_quantize(w.numpy(), bits=bits)) for w in ws]
    with one_thread(), torch.no_grad():
        predicted = mlp_forward(ws, torch.from_numpy(np.asarray(x, np.float32))).argmax(dim=1)
    return float((predicted.numpy() == np.asarray(y)).mean())
