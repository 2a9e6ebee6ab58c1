"""Hand-written backward passes of the layers models are built of, in float64: what torch.autograd computes for them.

Every backward takes the forward's inputs and the upstream gradient dy = dL/dy (of the forward's result's shape, any
values: a random one, never only ones) and returns dL/d(input) for each input, recomputing what it needs of the
forward. The forwards stand beside them, each as its torch.nn.functional namesake (several are chapter 3's, 7's and
9's references, reused here). All work is in float64, and so are the results.

    softmax            ds = s * (dy - sum(dy * s))                          (the sum over the softmax axis)
    cross-entropy      dlogits = dloss * (softmax(logits) - onehot(target)) / kept rows, 0 on ignored rows
    LayerNorm          dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma   (means over a row)
    attention          dS = P * (dP - sum(dP * P)),  dP = dO V^T;  dQ = dS K scale,  dK = dS^T Q scale,  dV = P^T dO
    conv2d             dw = dy @ columns^T,  dx = col2im(w^T @ dy),  db = sum(dy)       (as a GEMM over im2col)
    pooling            max: dy to the first maximum of each window; average: dy / (pixels of the window) to each
    BatchNorm          training: LayerNorm's formula over the batch axes; inference: dx = dy * gamma * rstd_running
"""

import math

import numpy as np

from .._validate import finite_array, nonnegative_int, positive_int, positive_number
from ..conv import conv2d, im2col, output_size
from ..inference.attention import softmax as _stable_softmax
from ..interview.normalization import layer_norm, layer_norm_backward
from ..interview.pooling import avg_pool2d, max_pool2d
from ..interview.softmax import cross_entropy

__all__ = ["softmax", "softmax_backward", "cross_entropy", "cross_entropy_backward", "layer_norm",
           "layer_norm_backward", "attention", "attention_backward", "conv2d", "col2im", "conv2d_backward",
           "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "batch_norm",
           "batch_norm_backward"]


def _floats(name: str, value, ndim: int | None = None) -> np.ndarray:
    """A finite float array (with `ndim` dimensions where given), as float64."""
    return finite_array(name, value, ndim=ndim).astype(np.float64)


def _upstream(dy, shape: tuple) -> np.ndarray:
    """dy = dL/dy: finite floats of the forward result's shape, as float64."""
    dy = _floats("dy", dy)
    if dy.shape != tuple(shape):
        raise ValueError(f"dy must have the forward result's shape {tuple(shape)}, got {dy.shape}")
    return dy


def _per_channel(name: str, value, n: int) -> np.ndarray:
    value = _floats(name, value)
    if value.shape != (n,):
        raise ValueError(f"{name} must hold one float per channel, shape ({n},), got shape {value.shape}")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Softmax and cross-entropy


def softmax(x) -> np.ndarray:
    """softmax over the last axis of x (..., n), float64; the maximum subtracted first, so no exp overflows."""
    x = _floats("x", x)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a last axis of at least one element, got shape {x.shape}")
    return _stable_softmax(x, axis=-1)


def softmax_backward(x, dy) -> np.ndarray:
    """dL/dx for s = softmax(x) over the last axis, given dy = dL/ds: s * (dy - sum(dy * s)), the sum over the axis.

    The Jacobian is diag(s) - s s^T: its diagonal alone, dy * s * (1 - s), is right only when every dy of a row is
    equal (all ones, say), because then the off-diagonal terms and the row sum cancel the same way.
    """
    s = softmax(x)
    dy = _upstream(dy, s.shape)
    return s * (dy - (dy * s).sum(axis=-1, keepdims=True))


def cross_entropy_backward(logits, targets, dloss: float = 1.0, ignore_index: int = -100) -> np.ndarray:
    """dL/dlogits (N, C) of L = dloss * cross_entropy(logits, targets, ignore_index), the mean over kept rows.

    Row i with a kept target gets dloss * (softmax(logits[i]) - onehot(targets[i])) / kept, kept the number of rows
    whose target is not ignore_index; an ignored row gets 0. With every row ignored the loss is nan (0 / 0, as in
    torch) but no logit reaches it: the gradient is all zeros, as torch.autograd gives. Fused this way no log of a
    softmax is ever taken, so logits around 1e3 (or a target's probability of 1e-300) cost nothing in accuracy.
    """
    cross_entropy(logits, targets, ignore_index)  # validates logits, targets and ignore_index as the forward does
    if isinstance(dloss, bool) or not isinstance(dloss, int | float | np.floating) or not math.isfinite(dloss):
        raise ValueError(f"dloss must be a finite number (dL/dloss), got {dloss!r}")
    logits, targets = np.asarray(logits, dtype=np.float64), np.asarray(targets)
    kept = targets != ignore_index
    grad = np.zeros_like(logits)
    if kept.any():
        rows = np.flatnonzero(kept)
        grad[rows] = softmax(logits[rows])
        grad[rows, targets[rows]] -= 1
        grad *= float(dloss) / len(rows)
    return grad


# ---------------------------------------------------------------------------------------------------------------
# Attention


def _attention_arguments(q, k, v, causal, scale):
    q, k, v = _floats("q", q), _floats("k", k), _floats("v", v)
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"q, k and v must be (..., T, d), (..., S, d) and (..., S, dv) arrays of one rank >= 2, got "
                         f"shapes {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2] or k.shape[-2] < 1 or q.shape[-1] < 1:
        raise ValueError(f"k must be (..., S, d) with q's d = {q.shape[-1]} >= 1 and v (..., S, dv) with k's S >= 1, "
                         f"got q {q.shape}, k {k.shape}, v {v.shape}")
    if not isinstance(causal, bool | np.bool_):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else positive_number("scale", scale)
    return q, k, v, bool(causal), scale


def _probabilities(q, k, causal: bool, scale: float) -> np.ndarray:
    """P = softmax(q k^T scale), (..., T, S); causal: query i sees keys j <= i (torch's is_causal, top-left)."""
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        T, S = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((T, S), dtype=bool)), scores, -np.inf)  # key 0 is never masked
    return _stable_softmax(scores, axis=-1)


def attention(q, k, v, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """softmax(q k^T scale) v for q (..., T, d), k (..., S, d), v (..., S, dv): (..., T, dv), float64.

    As torch.nn.functional.scaled_dot_product_attention: scale defaults to 1 / sqrt(d), and causal lets query i see
    the keys j <= i (the mask aligned to the top left, whatever T and S).
    """
    q, k, v, causal, scale = _attention_arguments(q, k, v, causal, scale)
    return _probabilities(q, k, causal, scale) @ v


def attention_backward(q, k, v, dy, causal: bool = False, scale: float | None = None):
    """(dq, dk, dv) of y = attention(q, k, v, causal, scale), given dy = dL/dy (..., T, dv); float64.

    With P the probabilities and dP = dy v^T: dv = P^T dy; the softmax's Jacobian gives dS = P * (dP - rowsum(dP * P))
    (its row term: every probability of a row moves when one score does); then dq = dS k scale and dk = dS^T q scale.
    A masked position has P = 0, so dS = 0 there: no gradient crosses the mask.
    """
    q, k, v, causal, scale = _attention_arguments(q, k, v, causal, scale)
    P = _probabilities(q, k, causal, scale)
    dy = _upstream(dy, P.shape[:-1] + v.shape[-1:])
    dP = dy @ np.swapaxes(v, -1, -2)
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))
    return dS @ k * scale, np.swapaxes(dS, -1, -2) @ q * scale, np.swapaxes(P, -1, -2) @ dy


# ---------------------------------------------------------------------------------------------------------------
# Convolution and pooling


def _geometry(x_shape, kh: int, kw: int, stride, padding) -> tuple[int, int, int, int]:
    """Validated stride, padding and the output size (OH, OW) of a (kh, kw) window over x (B, C, H, W)."""
    s, p = positive_int("stride", stride), nonnegative_int("padding", padding)
    return s, p, output_size(x_shape[2], kh, s, p), output_size(x_shape[3], kw, s, p)


def col2im(columns, x_shape, kernel_size, stride: int = 1, padding: int = 0) -> np.ndarray:
    """The adjoint of aisys.conv.im2col: each entry of columns (B, C * kh * kw, OH * OW) added back into the pixel of
    x (B, C, H, W) it was copied from (padding dropped). A pixel in several windows receives the sum; so
    <im2col(x), c> = <x, col2im(c)> for every x and c, which is what makes it im2col's backward.

    kernel_size is an int or a pair (kh, kw); stride and padding ints; float64.
    """
    kh, kw = kernel_size if isinstance(kernel_size, tuple | list) else (kernel_size, kernel_size)
    kh, kw = positive_int("kernel_size[0]", kh), positive_int("kernel_size[1]", kw)
    if not (isinstance(x_shape, tuple | list) and len(x_shape) == 4):
        raise ValueError(f"x_shape must be a 4-D shape (B, C, H, W), got {x_shape!r}")
    B, C, H, W = (positive_int(f"x_shape[{i}]", n) for i, n in enumerate(x_shape))
    s, p, OH, OW = _geometry((B, C, H, W), kh, kw, stride, padding)
    columns = _floats("columns", columns)
    if columns.shape != (B, C * kh * kw, OH * OW):
        raise ValueError(f"columns must have shape {(B, C * kh * kw, OH * OW)} (im2col's of x_shape {tuple(x_shape)}),"
                         f" got {columns.shape}")
    columns = columns.reshape(B, C, kh, kw, OH, OW)
    padded = np.zeros((B, C, H + 2 * p, W + 2 * p))
    for i in range(kh):  # tap (i, j) of every window is a strided slice of the padded image, as in im2col
        for j in range(kw):
            padded[:, :, i:i + s * (OH - 1) + 1:s, j:j + s * (OW - 1) + 1:s] += columns[:, :, i, j]
    return padded[:, :, p:p + H, p:p + W]


def conv2d_backward(x, w, dy, stride: int = 1, padding: int = 0):
    """(dx, dw, db) of y = conv2d(x, w, b, stride, padding) (cross-correlation, torch's) for x (B, C, H, W) and
    w (OC, C, kh, kw), given dy (B, OC, OH, OW); float64.

    The forward is the GEMM y = W @ columns (W: (OC, C kh kw), columns = im2col(x): (C kh kw, B OH OW)), so as for
    any matmul dW = dy @ columns^T and dcolumns = W^T @ dy, and dx = col2im(dcolumns): a transposed convolution of
    dy with the kernel (for stride 1, a full correlation with the kernel flipped in both axes). db sums dy over
    everything but the channel.
    """
    x, w = _floats("x", x, ndim=4), _floats("w", w, ndim=4)
    (B, C), (OC, C_w, kh, kw) = x.shape[:2], w.shape
    if C_w != C:
        raise ValueError(f"w must be (OC, C, kh, kw) with x's C = {C} input channels, got shape {w.shape}")
    s, p, OH, OW = _geometry(x.shape, kh, kw, stride, padding)
    dy = _upstream(dy, (B, OC, OH, OW))
    columns = im2col(x, (kh, kw), s, p)  # (B, C kh kw, OH OW)
    dy_rows = dy.reshape(B, OC, OH * OW)
    dw = np.einsum("bop,bkp->ok", dy_rows, columns).reshape(w.shape)
    dcolumns = np.einsum("ok,bop->bkp", w.reshape(OC, C * kh * kw), dy_rows)
    return col2im(dcolumns, x.shape, (kh, kw), s, p), dw, dy.sum(axis=(0, 2, 3))


def _pool_arguments(x, kernel_size, stride, padding):
    x = _floats("x", x, ndim=4)
    k = positive_int("kernel_size", kernel_size)
    s = k if stride is None else stride
    p = nonnegative_int("padding", padding)
    if p > k // 2:
        raise ValueError(f"padding must be at most kernel_size // 2 = {k // 2} (as in PyTorch), got {p}")
    s, p, OH, OW = _geometry(x.shape, k, k, s, p)
    return x, k, s, p, OH, OW


def max_pool2d_backward(x, dy, kernel_size: int, stride: int | None = None, padding: int = 0) -> np.ndarray:
    """dL/dx of y = max_pool2d(x, kernel_size, stride, padding) (padding -inf; stride defaults to kernel_size),
    given dy (B, C, OH, OW); float64.

    Each window's dy goes to its maximum only. Ties: to the FIRST maximum in the window's row-major order (top row
    first, left to right), as torch does; the others get nothing (the max is not differentiable there, and this is
    one valid subgradient). A pixel that is the maximum of several overlapping windows receives the sum.
    """
    x, k, s, p, OH, OW = _pool_arguments(x, kernel_size, stride, padding)
    B, C = x.shape[:2]
    dy = _upstream(dy, (B, C, OH, OW))
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    taps = im2col(padded, k, s).reshape(B, C, k * k, OH, OW)
    first = taps.argmax(axis=2)  # argmax returns the first of equal maxima
    routed = (np.arange(k * k)[None, None, :, None, None] == first[:, :, None]) * dy[:, :, None]
    padded_grad = col2im(routed.reshape(B, C * k * k, OH * OW), padded.shape, k, s)
    return padded_grad[:, :, p:p + x.shape[2], p:p + x.shape[3]]


def avg_pool2d_backward(x, dy, kernel_size: int, stride: int | None = None, padding: int = 0) -> np.ndarray:
    """dL/dx of y = avg_pool2d(x, kernel_size, stride, padding) (count_include_pad=False: each window averages the
    pixels of the image it covers; stride defaults to kernel_size), given dy (B, C, OH, OW); float64.

    Every pixel of a window gets dy / (pixels the window covers); a pixel in several windows receives the sum.
    """
    x, k, s, p, OH, OW = _pool_arguments(x, kernel_size, stride, padding)
    B, C, H, W = x.shape
    dy = _upstream(dy, (B, C, OH, OW))
    count = im2col(np.ones((1, 1, H, W)), k, s, p).sum(axis=1).reshape(1, 1, OH, OW)  # image pixels per window
    spread = np.broadcast_to((dy / count)[:, :, None], (B, C, k * k, OH, OW))
    return col2im(spread.reshape(B, C * k * k, OH * OW), x.shape, k, s, p)


# ---------------------------------------------------------------------------------------------------------------
# BatchNorm


def _batch_norm_arguments(x, running_mean, running_var, gamma, training, eps):
    x = _floats("x", x)
    if x.ndim < 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must be an (N, C, ...) array with N >= 1 and C >= 1 (channels on axis 1), got shape "
                         f"{x.shape}")
    C = x.shape[1]
    gamma = _per_channel("gamma", gamma, C)
    if not isinstance(training, bool | np.bool_):
        raise ValueError(f"training must be True or False, got {training!r}")
    eps = positive_number("eps", eps)
    axes = (0,) + tuple(range(2, x.ndim))  # every axis but the channel's
    shape = (1, C) + (1,) * (x.ndim - 2)
    if training:
        if x.size // C < 2:
            raise ValueError(f"training needs more than one value per channel (as torch), got x of shape {x.shape}")
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased, two passes
    else:
        mean = _per_channel("running_mean", running_mean, C).reshape(shape)
        var = _per_channel("running_var", running_var, C).reshape(shape)
        if (var < 0).any():
            raise ValueError("running_var must hold variances >= 0")
    return x, gamma.reshape(shape), bool(training), eps, axes, mean, 1 / np.sqrt(var + eps)


def batch_norm(x, running_mean, running_var, gamma, beta, training: bool = False, eps: float = 1e-5) -> np.ndarray:
    """BatchNorm of x (N, C, ...) per channel (axis 1), as torch.nn.functional.batch_norm; float64.

    training: normalise by the batch's mean and biased variance over every axis but the channel's (the running
    statistics are neither read nor updated here: pass None); inference: by running_mean and running_var (C,).
    Then y = xhat * gamma + beta.
    """
    x, gamma, training, eps, axes, mean, rstd = _batch_norm_arguments(x, running_mean, running_var, gamma, training,
                                                                       eps)
    return (x - mean) * rstd * gamma + _per_channel("beta", beta, x.shape[1]).reshape(gamma.shape)


def batch_norm_backward(x, running_mean, running_var, gamma, dy, training: bool = False, eps: float = 1e-5):
    """(dx, dgamma, dbeta) of y = batch_norm(x, running_mean, running_var, gamma, beta, training, eps), given dy.

    Training: the batch's mean and variance depend on every sample, so dx couples the samples, exactly as
    LayerNorm's couples a row: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, the means over
    every axis but the channel's (Ioffe & Szegedy 2015, section 3). Inference: the statistics are constants, so
    BatchNorm is an affine map per channel and dx = dy * gamma * rstd. dgamma = sum(dy * xhat), dbeta = sum(dy)
    over every axis but the channel's, in both modes.
    """
    x, gamma, training, eps, axes, mean, rstd = _batch_norm_arguments(x, running_mean, running_var, gamma, training,
                                                                       eps)
    dy = _upstream(dy, x.shape)
    xhat = (x - mean) * rstd
    g = dy * gamma
    if training:
        dx = rstd * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    else:
        dx = g * rstd
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)
