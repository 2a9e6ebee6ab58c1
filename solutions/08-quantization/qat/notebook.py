# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: quantization-aware training with the straight-through estimator
#
# **You will learn** to train a network *through* its quantization: fake quantization rounds the weights in the
# forward pass so that training sees the error the quantized model will have, and the straight-through estimator
# (Bengio, Léonard & Courville 2013, arXiv 1308.3432; Jacob et al. 2018, arXiv 1712.05877, section 3) gives the
# gradient that rounding itself does not have. `round` is a staircase: its derivative is 0 almost everywhere, so
# autograd through it would train nothing. The estimator passes the gradient straight through the rounding, as if
# it were the identity, and stops it only where the clamp to the code range bites. You then fine-tune a small
# network with 4-bit weights and see it recover accuracy that rounding the trained weights after the fact loses.
#
# **The conventions, all of them** (those of `aisys.quant.affine`, the chapter's base):
# - codes are integers in `[qmin, qmax]`: symmetric `[-(2**(bits-1) - 1), 2**(bits-1) - 1]` (`-7..7` at 4
#   bits), asymmetric `[-2**(bits-1), 2**(bits-1) - 1]` (`-8..7`); `bits` is an integer in `[2, 8]`;
# - `fake_quantize(x, scale, zero_point, bits, symmetric)` takes `x` a **float32** tensor of any shape, `scale` a
#   float32 tensor (> 0) and `zero_point` an integer tensor (in `[qmin, qmax]`; 0 when symmetric), both of a shape
#   that broadcasts against `x` (`()` per tensor, `(rows, 1)` per row), and returns the **float32** tensor
#   `(clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale` of `x`'s shape, where
#   - `x / scale` is computed in **float64** (`x.double() / scale.double()`) and rounded **half to even**
#     (`torch.round`), then the zero point is added and the clamp applied;
#   - the last product, `(code - zero_point) * scale`, is done in float32 (code - zero_point as float32 times the
#     float32 scale): the result must match the reference **bit for bit**;
# - its gradient with respect to `x` (the straight-through estimator) is `grad_output` where the **rounded** code
#   `round(x / scale) + zero_point` lies in `[qmin, qmax]`, **both ends included**, and 0 where the clamp changed
#   it: with codes `-7..7` and scale 1, `x = 7.4` (code 7) passes its gradient and `x = 7.5` (code 8, half to
#   even) does not; `x = -7.5` rounds to -8 and does not either. This is `torch.fake_quantize_per_tensor_affine`'s
#   rule (its backward's mask). `scale` and `zero_point` get no gradient (return `None` for them);
# - `x` holding NaN or an infinity raises `ValueError` whose message names `x`; a scale that is not > 0 raises
#   `ValueError` naming `scale`;
# - the checks call `fake_quantize_arrays`, `fake_quantize_backward` and `fake_quantize_error`, given under your
#   function: they carry numpy arrays to tensors and back. Leave them as they are.
#
# **LSQ** (section 2): its quantizer is `v_hat = round(clamp(v / s, -Q_N, Q_P)) * s` with
# `Q_N = Q_P = 2**(bits-1) - 1` (symmetric codes), and its gradients, with `r = v / s` (computed in **float32**,
# as `v / step` on float32 tensors):
# - `dL/dv = dL/dv_hat` where `-Q_N < r < Q_P` (strictly), else 0 (the straight-through estimator on the clamp);
# - `dL/ds = g * sum(dL/dv_hat * d)`, where `d = round(r) - r` if `-Q_N < r < Q_P`, `d = -Q_N` if `r <= -Q_N`
#   and `d = Q_P` if `r >= Q_P` (the paper's eq. 3; at exactly `r = Q_P` the clamped branch, `Q_P`), and
#   `g = 1 / sqrt(N * Q_P)` with `N = v.numel()`, the gradient scale of section 2.2 that lets one step size,
#   fed by N gradients, learn at the pace of the weights;
# - `step` is a 0-dimensional float32 tensor; its gradient has its shape. `v_hat` and `dL/dv` are compared with
#   the reference exactly (one float32 division, rounding half to even, one product), `dL/ds`, a float32 sum whose
#   order may differ, within a relative 1e-5. The checks call `lsq_arrays`, given under it.
#
# **The QAT part**: a multilayer perceptron (three weight matrices `(out, in)`, no biases, ReLU between them, given
# as `mlp_forward` below) classifies points; its float weights are trained for you. `fake_quantize_weight(w,
# bits)` fake-quantizes a weight **per tensor, symmetric**, with `scale = max|w| / qmax` computed in float64 from
# the weight's values *without a gradient* (`w.detach()`: the scale is a constant of the step; at least 2**-126),
# zero point 0. `train_qat(weights, x, y, steps, lr, bits)` fine-tunes copies of the weights with **full-batch
# `torch.optim.Adam(lr=lr)`** for `steps` steps of `torch.nn.functional.cross_entropy(mlp_forward(...), y)`, every
# weight passed through `fake_quantize_weight` in the forward pass, and returns the trained float weights as a list
# of float32 numpy arrays. The check rounds your weights to 4 bits (per tensor, round to nearest) and requires a
# test accuracy at least 0.04 above that of the float weights rounded the same way (post-training quantization).

# %%
import math

import numpy as np
import torch

from aisys_grader import checker

check = checker("08-quantization/qat", globals())
torch.set_num_threads(1)  # small tensors: one thread is as fast and gives the same result every run

# %% [markdown]
# ## 1. Fake quantization with the straight-through estimator
#
# Write the forward pass (save what the backward needs with `ctx.save_for_backward`) and the backward pass, which
# returns one gradient per argument of `forward`: the gradient for `x`, then `None` for `scale`, `zero_point`,
# `qmin` and `qmax`. Then `fake_quantize`, which checks its inputs, finds `qmin, qmax` and calls
# `FakeQuantizeSTE.apply`.

# %% tags=["solution"]
class FakeQuantizeSTE(torch.autograd.Function):
    """(clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale, with the straight-through gradient."""

    @staticmethod
    def forward(ctx, x, scale, zero_point, qmin, qmax):
        ### BEGIN SOLUTION
        codes = torch.round(x.double() / scale.double()) + zero_point.double()
        inside = (codes >= qmin) & (codes <= qmax)  # the rounded code, both ends of the range included
        ctx.save_for_backward(inside)
        return (codes.clamp(qmin, qmax) - zero_point.double()).float() * scale.float()
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_output):
        ### BEGIN SOLUTION
        (inside,) = ctx.saved_tensors
        return grad_output * inside.to(grad_output.dtype), None, None, None, None
        ### END SOLUTION


def fake_quantize(x, scale, zero_point, bits=4, symmetric=True):
    """x fake-quantized to `bits` (float32, x's shape), with the straight-through estimator's gradient."""
    ### BEGIN SOLUTION
    if not torch.isfinite(x).all():
        raise ValueError("x must hold finite values, got NaN or an infinity")
    if not (scale > 0).all():
        raise ValueError("scale must be > 0 everywhere")
    qmax = 2 ** (bits - 1) - 1
    qmin = -qmax if symmetric else -qmax - 1
    return FakeQuantizeSTE.apply(x, scale, zero_point, qmin, qmax)
    ### END SOLUTION


def fake_quantize_arrays(x, scale, zero_point, bits, symmetric):
    """What the checks call: numpy arrays in, fake_quantize's float32 result out."""
    x = torch.from_numpy(np.array(x, dtype=np.float32))
    scale = torch.from_numpy(np.array(scale, dtype=np.float32))
    zero_point = torch.from_numpy(np.array(zero_point, dtype=np.int64))
    return fake_quantize(x, scale, zero_point, bits, symmetric).detach().numpy()


def fake_quantize_backward(x, scale, zero_point, bits, symmetric, grad_output):
    """What the checks call: the gradient reaching x when grad_output flows back through fake_quantize."""
    x = torch.tensor(np.array(x, dtype=np.float32), requires_grad=True)
    scale = torch.from_numpy(np.array(scale, dtype=np.float32))
    zero_point = torch.from_numpy(np.array(zero_point, dtype=np.int64))
    fake_quantize(x, scale, zero_point, bits, symmetric).backward(torch.from_numpy(np.array(grad_output, np.float32)))
    return x.grad.numpy()


def fake_quantize_error(x, scale, zero_point, bits, symmetric):
    """What the errors check calls: [the exception's name, its message] if fake_quantize raises, else None."""
    try:
        fake_quantize_arrays(x, scale, zero_point, bits, symmetric)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - the check judges which error it is
        return [type(error).__name__, str(error)]
    return None


# %%
x = torch.tensor([-8.6, -7.5, -7.4, 0.5, 1.5, 7.4, 7.5], requires_grad=True)
y = fake_quantize(x, torch.tensor(1.0), torch.tensor(0), bits=4)
y.sum().backward()
print(y.detach(), x.grad)  # -7, -7, -7, 0, 2, 7, 7 and 0, 0, 1, 1, 1, 1, 0

# %% tags=["check"]
check("forward")
### BEGIN HIDDEN TESTS
check("forward", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("gradient")
### BEGIN HIDDEN TESTS
check("gradient", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("errors")
### BEGIN HIDDEN TESTS
check("errors", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. LSQ: a learned step size
#
# Learned Step Size Quantization (Esser et al. 2020, arXiv 1902.08153) makes the scale a parameter that trains.
# Write its quantizer and both gradients as stated at the top (**LSQ**).
#
# `lsq_arrays(v, step, bits, grad_output)`, given below, is what the check calls.

# %% tags=["solution"]
class LSQQuantize(torch.autograd.Function):
    """round(clamp(v / s, -qn, qp)) * s, with LSQ's gradients for v and for the step size s."""

    @staticmethod
    def forward(ctx, v, step, qn, qp, grad_scale):
        ### BEGIN SOLUTION
        ratio = v / step
        ctx.save_for_backward(ratio)
        ctx.qn, ctx.qp, ctx.grad_scale = qn, qp, grad_scale
        return torch.round(ratio.clamp(-qn, qp)) * step
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_output):
        ### BEGIN SOLUTION
        (ratio,) = ctx.saved_tensors
        below, above = ratio <= -ctx.qn, ratio >= ctx.qp
        inside = ~(below | above)
        d = torch.where(inside, torch.round(ratio) - ratio, torch.where(below, -float(ctx.qn), float(ctx.qp)))
        grad_step = ((grad_output * d).sum() * ctx.grad_scale).reshape(())
        return grad_output * inside.to(grad_output.dtype), grad_step, None, None, None
        ### END SOLUTION


def lsq_quantize(v, step, bits=4):
    """LSQ's quantizer of v with the learnable scalar step size `step` (symmetric codes)."""
    ### BEGIN SOLUTION
    qp = 2 ** (bits - 1) - 1
    return LSQQuantize.apply(v, step, qp, qp, 1.0 / math.sqrt(v.numel() * qp))
    ### END SOLUTION


def lsq_arrays(v, step, bits, grad_output):
    """What the check calls: [v_hat, dL/dv, dL/ds] as float32 numpy arrays, given dL/dv_hat."""
    v = torch.tensor(np.array(v, dtype=np.float32), requires_grad=True)
    s = torch.tensor(float(step), dtype=torch.float32, requires_grad=True)
    lsq_quantize(v, s, bits).backward(torch.from_numpy(np.array(grad_output, dtype=np.float32)))
    out = lsq_quantize(v.detach(), s.detach(), bits)
    return [out.numpy(), v.grad.numpy(), s.grad.numpy()]


# %% tags=["check"]
check("lsq")
### BEGIN HIDDEN TESTS
check("lsq", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Quantization-aware training
#
# `mlp_forward` is given. Write `fake_quantize_weight` (per tensor, symmetric, the scale from the detached weight)
# and `train_qat`. The cell after them trains a float model, rounds it to 4 bits (post-training quantization,
# PTQ), and fine-tunes it with your QAT: compare the accuracies.

# %%
def mlp_forward(weights, x):
    """Logits of the MLP: x @ W.T for each weight matrix (out, in), ReLU between layers."""
    for i, w in enumerate(weights):
        x = x @ w.T
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x


# %% tags=["solution"]
def fake_quantize_weight(w, bits=4):
    """w fake-quantized per tensor, symmetric: scale max|w| / qmax from w's values (no gradient through it)."""
    ### BEGIN SOLUTION
    qmax = 2 ** (bits - 1) - 1
    scale = (w.detach().double().abs().max() / qmax).float().clamp_min(2.0 ** -126)
    return fake_quantize(w, scale, torch.tensor(0), bits, True)
    ### END SOLUTION


def train_qat(weights, x, y, steps, lr, bits=4):
    """Fine-tune copies of `weights` with every weight fake-quantized: full-batch Adam on the cross-entropy."""
    ### BEGIN SOLUTION
    params = [torch.tensor(np.array(w, dtype=np.float32), requires_grad=True) for w in weights]
    x, y = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.int64))
    optimizer = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        logits = mlp_forward([fake_quantize_weight(p, bits) for p in params], x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        optimizer.step()
    return [p.detach().numpy() for p in params]
    ### END SOLUTION


# %%
def make_data(seed, train=1024, test=2048, features=8, classes=4):
    """Points labelled by a random teacher network; the features come at scales 1 to 16."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(train + test, features, generator=g)
    labels = (torch.tanh(x @ torch.randn(features, 32, generator=g)) @ torch.randn(32, classes, generator=g)).argmax(1)
    x = x * 2.0 ** torch.linspace(0, 4, features)
    return x[:train], labels[:train], x[train:], labels[train:]


def accuracy(weights, x, y, bits=None):
    """Test accuracy, the weights rounded per tensor to `bits` first if given (no gradient needed)."""
    with torch.no_grad():
        ws = [torch.as_tensor(w) for w in weights]
        ws = [fake_quantize_weight(w, bits) for w in ws] if bits else ws
        return float((mlp_forward(ws, x).argmax(1) == y).float().mean())


x_train, y_train, x_test, y_test = make_data(3)
g = torch.Generator().manual_seed(4)
float_weights = [torch.randn(o, i, generator=g) / math.sqrt(i) for i, o in [(8, 64), (64, 64), (64, 4)]]
optimizer = torch.optim.Adam([w.requires_grad_() for w in float_weights], lr=2e-2)
for _ in range(150):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(mlp_forward(float_weights, x_train), y_train).backward()
    optimizer.step()
float_weights = [w.detach().numpy() for w in float_weights]
qat_weights = train_qat(float_weights, x_train, y_train, steps=100, lr=3e-3, bits=4)
print(f"float {accuracy(float_weights, x_test, y_test):.3f}, PTQ W4 {accuracy(float_weights, x_test, y_test, 4):.3f}, "
      f"QAT W4 {accuracy(qat_weights, x_test, y_test, 4):.3f}")

# %% tags=["check"]
check("qat_recovers")
### BEGIN HIDDEN TESTS
check("qat_recovers", hidden=True)
### END HIDDEN TESTS
