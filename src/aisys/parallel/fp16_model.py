"""A small fp16 model built so that its gradients overflow at a loss scale of 2^16 and underflow without one.

One linear layer y = x @ W, fitted by SGD to targets t = x @ W* under the mean squared error, the way mixed-precision
training runs it (Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3): float32 master weights,
cast to fp16 for the forward and backward passes; the loss computed in float32 from the fp16 outputs and multiplied by
the loss scale; the gradient reaching y cast to fp16 (where it overflows to inf, or flushes to zero) and the weight
gradient x^T g an fp16 matrix product.

The columns of x are orthogonal with norm sqrt(batch), so the gradient is (W - W*) / 4 (2 x^T x / (batch * outputs)
times the error) and a step with lr = 2 halves the error, in every direction alike. The initial weights are of size
`start` (16): the first gradients are of order 10, and times 2^16 they overflow fp16's largest value, 65504. The
solution W* is of size `target` (2^-16): as the fit converges the gradients shrink past fp16's smallest subnormal,
2^-24, and without a loss scale they flush to zero and learning stops, with the loss still far above what fp16's
forward pass can reach.

`train` drives any scaler step with the signature of `aisys.parallel.loss_scaling.step`: the exercise's checks pass
the student's, the book page the reference's. Nothing here holds an answer.
"""

import math

import numpy as np

from .._validate import positive_int, positive_number

SHAPE = (32, 16, 8)  # batch, inputs, outputs of the layer y = x @ W
START = 16.0  # the size of the initial weights: gradients of order 10, which overflow fp16 times 2^16
TARGET = 2.0 ** -16  # the size of the solution: gradients near the end below fp16's smallest subnormal


def build(seed: int = 0, *, start: float = START, target: float = TARGET) -> dict:
    """The model: {"x": fp16 inputs (batch, inputs), "t": float32 targets (batch, outputs), "w": float32 initial
    master weights (inputs, outputs)}, the same for the same seed."""
    positive_number("start", start)
    positive_number("target", target)
    rng = np.random.default_rng(seed)
    batch, inputs, outputs = SHAPE
    q, _ = np.linalg.qr(rng.standard_normal((batch, inputs)))  # orthonormal columns
    x = (q * math.sqrt(batch)).astype(np.float16)
    solution = (rng.standard_normal((inputs, outputs)) * target).astype(np.float32)
    t = (x.astype(np.float32) @ solution).astype(np.float32)
    w = (rng.standard_normal((inputs, outputs)) * start).astype(np.float32)
    return {"x": x, "t": t, "w": w}


def loss_and_grads(model: dict, w, scale: float = 1.0) -> tuple[float, np.ndarray]:
    """(the float32 loss, the fp16 gradient of scale * loss with respect to the fp16 copy of w).

    Forward y = x @ fp16(w) in fp16; loss = mean((float32(y) - t)^2) in float32; backward of loss * float32(scale):
    the gradient reaching y is cast to fp16, then the weight gradient is the fp16 product x^T g."""
    import torch

    w16 = torch.from_numpy(np.asarray(w, dtype=np.float32)).half().requires_grad_()
    y = torch.from_numpy(model["x"]) @ w16
    loss = ((y.float() - torch.from_numpy(model["t"])) ** 2).mean()
    (loss * torch.tensor(scale, dtype=torch.float32)).backward()
    return float(loss.detach()), w16.grad.numpy()


def train(model: dict, steps: int, lr: float, scaler: dict | None = None, step=None) -> dict:
    """`steps` SGD steps from the model's initial weights: {"losses": the loss before each step and after the last
    (steps + 1), "scales": the scale each step used, "skipped": whether each step was skipped, "w": the final
    float32 master weights, "zero_grads": the fraction of each step's fp16 gradient that is exactly 0}.

    With a scaler, each step back-propagates scale * loss and calls step(params, grads, scaler, lr) with
    params = [w] and grads = [the fp16 gradient], which returns (params, scaler, skipped). Without one (None) the loss
    is not scaled and each step is w - lr * float32(gradient)."""
    positive_int("steps", steps)
    positive_number("lr", lr)
    if scaler is not None and step is None:
        raise ValueError("step must be given with a scaler: a function (params, grads, scaler, lr) -> "
                         "(params, scaler, skipped)")
    w = np.asarray(model["w"], dtype=np.float32)
    losses, scales, skipped, zeros = [], [], [], []
    for _ in range(steps):
        scale = 1.0 if scaler is None else float(scaler["scale"])
        loss, grad = loss_and_grads(model, w, scale)
        losses.append(loss)
        scales.append(scale)
        zeros.append(float(np.mean(grad == 0)))
        if scaler is None:
            w = w - np.float32(lr) * grad.astype(np.float32)
            skipped.append(False)
        else:
            params, scaler, was_skipped = step([w], [grad], scaler, lr)
            w = np.asarray(params[0])
            skipped.append(bool(was_skipped))
    losses.append(loss_and_grads(model, w)[0])
    return {"losses": losses, "scales": scales, "skipped": skipped, "w": w, "zero_grads": zeros}
