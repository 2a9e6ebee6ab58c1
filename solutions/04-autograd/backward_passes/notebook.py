# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: backward passes by hand
#
# **You will learn** to derive and write the backward pass of every layer a transformer or a CNN is built of —
# softmax, cross-entropy with ignored rows, LayerNorm, causal attention, convolution, max and average pooling,
# BatchNorm in training and in inference — the vector-Jacobian products a framework's autograd calls (Goodfellow,
# Bengio & Courville, *Deep Learning*, section 6.5; the CS231n notes on backpropagation). Each one is checked on
# every element against central finite differences of the forward and against what `torch.autograd` gives, always
# with a **random upstream gradient**: with an upstream of all ones, a softmax or LayerNorm backward that forgets
# its row terms still looks right, because those terms cancel for a constant upstream. The chapter's page
# {doc}`../../04-autograd/matrix-calculus` derives each formula.
#
# **The conventions, all of them:**
# - Every function takes **the forward's inputs** and **the upstream gradient** `dy = dL/dy` (an array of the
#   forward result's shape, any values) and returns `dL/d(input)`; it recomputes whatever it needs of the forward.
#   The forwards are given in the cell below (you may call them; they are what the checks differentiate).
#   Inputs are float64 arrays; every gradient you return must be a **float64** array of exactly its input's shape.
# - Several gradients are returned as a **tuple**, in the order each section states.
# - Parameters that only shift the output (`beta`, the bias `b`) change no gradient and are not arguments; their
#   own gradients (`dbeta`, `db`) are still returned.
# - `softmax_backward(x, dy)`: softmax over the **last** axis of `x` (any number of leading axes).
# - `cross_entropy_backward(logits, targets, dloss, ignore_index)`: `logits (N, C)`, `targets (N,)` int64 class
#   indices or `ignore_index`; the loss is the **mean over the kept rows** (those whose target is not
#   `ignore_index`), as `torch.nn.functional.cross_entropy`, and `dloss = dL/dloss` is a number. Ignored rows get a
#   gradient of 0. **Every row ignored**: the loss is `nan` (0 / 0, as in torch), but no logit reaches it: return
#   all zeros (what `torch.autograd` gives). Logits may be around `1e3`: nothing may overflow.
# - `layer_norm_backward(x, gamma, dy, eps)`: `x (M, N)` normalised over each row with its mean and **biased**
#   variance, eps inside the square root; returns `(dx, dgamma, dbeta)`, `dgamma` and `dbeta` of shape `(N,)`.
# - `attention_backward(q, k, v, dy, causal)`: one head, `q (T, d)`, `k (S, d)`, `v (S, dv)`, scale `1 / sqrt(d)`;
#   `causal=True` lets query `i` see keys `j <= i` (torch's `is_causal`, aligned to the top left even when
#   `T != S`). Returns `(dq, dk, dv)`.
# - `conv2d_backward(x, w, dy, stride, padding)`: `x (B, C, H, W)`, `w (OC, C, kh, kw)`, cross-correlation as
#   `torch.nn.functional.conv2d` (the kernel is not flipped), one int stride and one int zero padding for both
#   axes, output size `(H + 2 padding - kh) // stride + 1`. Returns `(dx, dw, db)`, `db` of shape `(OC,)`.
# - `max_pool2d_backward(x, dy, kernel_size, stride)` and `avg_pool2d_backward(...)`: `x (B, C, H, W)`, square
#   `kernel_size` windows, no padding, output size `(H - kernel_size) // stride + 1`; windows may overlap
#   (`stride < kernel_size`), and then a pixel in several windows gets the **sum**. Max pooling sends each window's
#   `dy` to its maximum only; on a **tie**, to the **first** maximum in the window's row-major order (top row first,
#   left to right), as torch does.
# - `batch_norm_backward(x, running_mean, running_var, gamma, dy, training, eps)`: `x (N, C)` or `(N, C, H, W)`,
#   channels on axis 1, statistics per channel over every other axis. `training=True`: the batch's mean and
#   **biased** variance (`running_mean` and `running_var` are `None`); `training=False`: the given running
#   statistics `(C,)`. Returns `(dx, dgamma, dbeta)`, the last two of shape `(C,)`.
# - **How the checks judge:** every element of every gradient against central differences of the forward,
#   `(L(a + h) - L(a - h)) / (2h)` with `h = 1e-6` and `L = sum(dy * y)`, within `rtol = 1e-5`, `atol = 1e-6` (the
#   difference's truncation error is about `h^2` and its rounding about `1e-16 |L| / h`, far below both; a real
#   mistake is off by more than `1e-3`); then against `torch.autograd`'s gradients within `rtol = 1e-8`,
#   `atol = 1e-10` (float64 sums taken in another order). NaN anywhere fails. Max pooling on ties is judged
#   against torch only: the maximum has no derivative there, and central differences split the gradient.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys_grader import checker

check = checker("04-autograd/backward_passes", globals())

# %% [markdown]
# ## The forwards (given)
#
# The functions whose gradients you write, in numpy and float64. Read them as the definition of each layer.

# %%
def softmax(x):
    """softmax over the last axis; the maximum is subtracted first so that no exp overflows."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cross_entropy(logits, targets, ignore_index=-100):
    """The mean over kept rows of -log softmax(logits[i])[targets[i]]; nan when every row is ignored."""
    kept = targets != ignore_index
    z = logits[kept]
    m = z.max(axis=1, keepdims=True)
    log_probs = z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(z)), targets[kept]].mean() if kept.any() else np.nan


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def attention(q, k, v, causal=False):
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    return softmax(scores) @ v


def conv2d(x, w, b, stride=1, padding=0):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    (B, _, H, W), (OC, _, kh, kw) = x.shape, w.shape
    OH, OW = (H - kh) // stride + 1, (W - kw) // stride + 1
    y = np.zeros((B, OC, OH, OW))
    for i in range(kh):  # tap (i, j) of every window is a strided slice of the padded input
        for j in range(kw):
            patch = x[:, :, i:i + stride * (OH - 1) + 1:stride, j:j + stride * (OW - 1) + 1:stride]
            y += np.einsum("bchw,oc->bohw", patch, w[:, :, i, j])
    return y + b[:, None, None]


def _windows(x, kernel_size, stride):
    """(B, C, OH, OW, k, k): every window of x, as a view."""
    view = np.lib.stride_tricks.sliding_window_view(x, (kernel_size, kernel_size), axis=(2, 3))
    return view[:, :, ::stride, ::stride]


def max_pool2d(x, kernel_size, stride):
    return _windows(x, kernel_size, stride).max(axis=(4, 5))


def avg_pool2d(x, kernel_size, stride):
    return _windows(x, kernel_size, stride).mean(axis=(4, 5))


def batch_norm(x, running_mean, running_var, gamma, beta, training, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))  # every axis but the channel's
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


# %% [markdown]
# ## 1. Softmax
#
# `softmax_backward(x, dy)` returns `dx`. The Jacobian of `s = softmax(x)` on a row is `diag(s) - s s^T`: every
# output moves when any input does.

# %% tags=["solution"]
def softmax_backward(x, dy):
    """dL/dx of s = softmax(x) over the last axis: s * (dy - sum(dy * s)), the sum over the row."""
    ### BEGIN SOLUTION
    s = softmax(x)
    return s * (dy - (dy * s).sum(axis=-1, keepdims=True))
    ### END SOLUTION


# %% tags=["check"]
check("softmax_gradients")
### BEGIN HIDDEN TESTS
check("softmax_gradients", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Cross-entropy with ignored rows
#
# `cross_entropy_backward(logits, targets, dloss, ignore_index=-100)` returns `dlogits (N, C)`. Go straight from
# the loss to the logits (softmax and log fused): the gradient of a kept row is `softmax - onehot`, scaled.

# %% tags=["solution"]
def cross_entropy_backward(logits, targets, dloss, ignore_index=-100):
    """dL/dlogits of L = dloss * cross_entropy(logits, targets, ignore_index): zero on ignored rows."""
    ### BEGIN SOLUTION
    kept = targets != ignore_index
    grad = softmax(logits)
    grad[np.arange(len(targets))[kept], targets[kept]] -= 1
    grad[~kept] = 0
    return grad * dloss / max(int(kept.sum()), 1)  # no kept row: the gradient is all zeros
    ### END SOLUTION


# %% tags=["check"]
check("cross_entropy_gradients")
### BEGIN HIDDEN TESTS
check("cross_entropy_gradients", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ignored_rows")
### BEGIN HIDDEN TESTS
check("ignored_rows", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Logits around `1e3`: `exp(1000)` overflows float64, and a target's probability can underflow to 0.

# %% tags=["check"]
check("large_logits")
### BEGIN HIDDEN TESTS
check("large_logits", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. LayerNorm
#
# `layer_norm_backward(x, gamma, dy, eps=1e-5)` returns `(dx, dgamma, dbeta)`. Each element of a row moves the
# row's mean and variance, and through them every other element's output.

# %% tags=["solution"]
def layer_norm_backward(x, gamma, dy, eps=1e-5):
    """(dx, dgamma, dbeta) of LayerNorm over the rows of x (M, N)."""
    ### BEGIN SOLUTION
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma  # the gradient reaching xhat
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)
    ### END SOLUTION


# %% tags=["check"]
check("layer_norm_gradients")
### BEGIN HIDDEN TESTS
check("layer_norm_gradients", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Attention
#
# `attention_backward(q, k, v, dy, causal=False)` returns `(dq, dk, dv)`: two matmuls and a softmax between them.

# %% tags=["solution"]
def attention_backward(q, k, v, dy, causal=False):
    """(dq, dk, dv) of y = softmax(q k^T / sqrt(d), masked if causal) v."""
    ### BEGIN SOLUTION
    scale = 1 / np.sqrt(q.shape[1])
    scores = q @ k.T * scale
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    p = softmax(scores)
    dp = dy @ v.T
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))  # softmax's Jacobian; 0 where masked, since p = 0
    return ds @ k * scale, ds.T @ q * scale, p.T @ dy
    ### END SOLUTION


# %% tags=["check"]
check("attention_gradients")
### BEGIN HIDDEN TESTS
check("attention_gradients", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("causal_attention")
### BEGIN HIDDEN TESTS
check("causal_attention", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Convolution
#
# `conv2d_backward(x, w, dy, stride=1, padding=0)` returns `(dx, dw, db)`. Every output is a sum of products of
# one window of the padded input with the kernel: follow each product back to the input pixel and the tap it used.

# %% tags=["solution"]
def conv2d_backward(x, w, dy, stride=1, padding=0):
    """(dx, dw, db) of y = conv2d(x, w, b, stride, padding)."""
    ### BEGIN SOLUTION
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    OC, C, kh, kw = w.shape
    OH, OW = dy.shape[2:]
    dpadded, dw = np.zeros_like(padded), np.zeros_like(w)
    for i in range(kh):  # tap (i, j) of every window is a strided slice of the padded input
        for j in range(kw):
            rows, cols = slice(i, i + stride * (OH - 1) + 1, stride), slice(j, j + stride * (OW - 1) + 1, stride)
            dw[:, :, i, j] = np.einsum("bohw,bchw->oc", dy, padded[:, :, rows, cols])
            dpadded[:, :, rows, cols] += np.einsum("bohw,oc->bchw", dy, w[:, :, i, j])
    H, W = x.shape[2:]
    return dpadded[:, :, padding:padding + H, padding:padding + W], dw, dy.sum(axis=(0, 2, 3))
    ### END SOLUTION


# %% tags=["check"]
check("conv_gradients")
### BEGIN HIDDEN TESTS
check("conv_gradients", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Pooling
#
# `max_pool2d_backward(x, dy, kernel_size, stride)` and `avg_pool2d_backward(x, dy, kernel_size, stride)` each
# return `dx`.

# %% tags=["solution"]
def max_pool2d_backward(x, dy, kernel_size, stride):
    """dL/dx of y = max_pool2d(x, kernel_size, stride): each window's dy to its first maximum."""
    ### BEGIN SOLUTION
    k = kernel_size
    windows = _windows(x, k, stride)  # (B, C, OH, OW, k, k)
    B, C, OH, OW = windows.shape[:4]
    first = windows.reshape(B, C, OH, OW, k * k).argmax(axis=-1)  # argmax takes the first of equal maxima
    dx = np.zeros_like(x)
    b, c, i, j = np.indices((B, C, OH, OW))
    np.add.at(dx, (b, c, i * stride + first // k, j * stride + first % k), dy)  # add.at sums repeated indices
    return dx
    ### END SOLUTION


def avg_pool2d_backward(x, dy, kernel_size, stride):
    """dL/dx of y = avg_pool2d(x, kernel_size, stride): each window's dy shared equally by its pixels."""
    ### BEGIN SOLUTION
    k = kernel_size
    OH, OW = dy.shape[2:]
    dx = np.zeros_like(x)
    for i in range(k):
        for j in range(k):
            dx[:, :, i:i + stride * (OH - 1) + 1:stride, j:j + stride * (OW - 1) + 1:stride] += dy / (k * k)
    return dx
    ### END SOLUTION


# %% tags=["check"]
check("max_pool_gradients")
### BEGIN HIDDEN TESTS
check("max_pool_gradients", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("max_pool_ties")
### BEGIN HIDDEN TESTS
check("max_pool_ties", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("avg_pool_gradients")
### BEGIN HIDDEN TESTS
check("avg_pool_gradients", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 7. BatchNorm
#
# `batch_norm_backward(x, running_mean, running_var, gamma, dy, training, eps=1e-5)` returns
# `(dx, dgamma, dbeta)`. In training the statistics are the batch's own, functions of every sample; in inference
# they are constants.

# %% tags=["solution"]
def batch_norm_backward(x, running_mean, running_var, gamma, dy, training, eps=1e-5):
    """(dx, dgamma, dbeta) of y = batch_norm(x, running_mean, running_var, gamma, beta, training, eps)."""
    ### BEGIN SOLUTION
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma.reshape(shape)
    if training:  # the batch statistics depend on every sample: LayerNorm's two terms, over the batch axes
        dx = rstd * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    else:
        dx = g * rstd
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)
    ### END SOLUTION


# %% tags=["check"]
check("batch_norm_training")
### BEGIN HIDDEN TESTS
check("batch_norm_training", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("batch_norm_inference")
### BEGIN HIDDEN TESTS
check("batch_norm_inference", hidden=True)
### END HIDDEN TESTS
