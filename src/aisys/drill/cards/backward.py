"""Backward passes by hand: matmul's shapes, softmax and LayerNorm under a constant upstream gradient, cross-entropy
with ignored rows, the input gradient of a convolution, max pooling's ties and BatchNorm in training against inference
(aisys.autograd.backward)."""

import numpy as np

from aisys.autograd import backward as bw

from ..card import Ask, Choice, Number, Several, card

PAGE = "04-autograd/matrix-calculus"


@card(topic="autograd and compilers", difficulty="easy", frequency="high", page=PAGE)
def matmul_backward_shapes():
    M, K, N = 64, 128, 32
    dY, B = np.ones((M, N)), np.ones((K, N))
    options = ("dA = dY @ B.T", "dA = B.T @ dY", "dA = dY.T @ B", "dA = A.T @ dY")
    return Ask(f"Y = A @ B with A of shape ({M}, {K}) and B ({K}, {N}); dY = dL/dY is given. Which gives dA = dL/dA?",
               Choice(options, 0),
               f"dA must have A's shape ({M}, {K}), and dY is ({M}, {N}): the only product of dY with B that has that "
               f"shape is dY ({M} x {N}) @ B.T ({N} x {K}) = {(dY @ B.T).shape}. Likewise dB = A.T @ dY. Each is one "
               "matmul, so the backward costs twice the forward's FLOPs.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def softmax_backward_with_ones_upstream():
    x = np.arange(5) - 2
    dx = bw.softmax_backward(x.astype(np.float64), np.ones(5))
    return Ask(f"s = softmax(x) over a row, x = {x.tolist()}. With the upstream gradient dL/ds all ones, what is the "
               "largest |dL/dx| in the row?",
               Number(float(np.abs(dx).max()), rel=0.01, abs=1e-9),
               "dx = s * (dy - sum(dy * s)); with dy = 1 the bracket is 1 - sum(s) = 0, so dx = 0 whatever x is (the "
               f"reference gives a largest |dx| of {np.abs(dx).max():.1e}): the loss sum(s) is the constant 1. That "
               "is why a gradient check with an all-ones upstream cannot catch a softmax backward that forgets or "
               "botches its row term: check with a random upstream.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def cross_entropy_ignored_rows():
    C = 4
    logits, targets = np.zeros((4, C)), np.array([0, 1, -100, 3])
    grad = bw.cross_entropy_backward(logits, targets, 1)
    kept = int((targets != -100).sum())
    return Ask(f"F.cross_entropy(logits, targets) with reduction 'mean', {C} classes, all logits 0, and targets "
               f"{targets.tolist()} (ignore_index = -100). What is dL/dlogits[0, 0], the target logit of row 0?",
               Number(float(grad[0, 0]), rel=0.01),
               f"A kept row's gradient is (softmax - onehot) / n with n the number of KEPT rows, {kept}: "
               f"(1/{C} - 1) / {kept} = {grad[0, 0]:.4f}. Dividing by all "
               f"{len(targets)} rows gives {(1 / C - 1) / len(targets):.4f}; the ignored row gets 0.")


@card(topic="autograd and compilers", difficulty="hard", frequency="medium", page=PAGE)
def layer_norm_mistakes_an_all_ones_check_misses():
    x, ones, unit = np.arange(12).reshape(3, 4) ** 2, np.ones((3, 4)), np.ones(4)
    x = x.astype(np.float64)
    right = bw.layer_norm_backward(x, unit, ones)[0]
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 10 ** -5)
    no_mean = rstd * (1 - (x - mean) * rstd * ((x - mean) * rstd).mean(axis=1, keepdims=True))
    options = ("leaving out the path through the variance, -xhat * mean(g * xhat)",
               "forgetting to multiply dy by gamma before the rest of dx",
               "leaving out the path through the mean, -mean(g)",
               "returning dgamma per row instead of summed over the rows")
    return Ask("A LayerNorm backward is checked with upstream dy all ones and gamma = 1 (its initial value). Which of "
               "these mistakes does that check NOT catch?",
               Several(options, frozenset({0, 1})),
               "With g = dy * gamma constant along a row, g - mean(g) = 0 and mean(g * xhat) = mean(xhat) = 0: the "
               "true dx is 0, and so is dx without the variance term, and dx with gamma left out (gamma = 1). "
               f"Leaving out the mean term leaves g - 0 (largest |dx| {np.abs(no_mean).max():.3f} against "
               f"{np.abs(right).max():.1e}), and dgamma per row has the wrong shape. Check with random dy and gamma.")


@card(topic="autograd and compilers", difficulty="medium", frequency="medium", page=PAGE)
def conv_input_gradient():
    x, w = np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    dx = bw.conv2d_backward(x, w, np.ones((1, 3, 3, 3)))[0]
    options = ("a transposed convolution of dy with w: for stride 1, dy padded by k - 1 - p and correlated with w "
               "flipped in both spatial axes, input and output channels swapped",
               "a correlation of dy with w itself, same padding as the forward",
               "a correlation of x with dy",
               "the forward applied to dy with the kernel transposed as a matrix")
    return Ask("y = conv2d(x, w, stride=1, padding=p), a cross-correlation as in PyTorch, with a k x k kernel. What is "
               "dL/dx, given dy?",
               Choice(options, 0),
               "As a GEMM y = W @ im2col(x), dx = col2im(W.T @ dy): every output sends dy * w back to the pixels its "
               "window read. Written as a convolution that is conv_transpose2d(dy, w); for stride 1, a full "
               "correlation with the kernel rotated 180 degrees. The correlation of x with dy is dw, not dx. With x "
               f"and w and dy all ones (5 x 5 input, 3 x 3 kernel), dx counts the windows each pixel is in times OC: "
               f"a corner gets {dx[0, 0, 0, 0]:.0f}, the centre {dx[0, 0, 2, 2]:.0f}.")


@card(topic="autograd and compilers", difficulty="easy", frequency="medium", page=PAGE)
def max_pool_tie():
    x = np.array([[[[3, 7], [7, 1]]]], dtype=np.float64)
    dx = bw.max_pool2d_backward(x, np.ones((1, 1, 1, 1)), 2)
    where = tuple(int(i) for i in np.argwhere(dx[0, 0])[0])
    options = ("to the first maximum in row-major order, (0, 1)", "to the last maximum, (1, 0)",
               "half to each maximum", "to both maxima, in full")
    return Ask(f"max_pool2d with a 2 x 2 window over the window {x[0, 0].astype(int).tolist()} (rows top to bottom). "
               "In PyTorch, where does the window's upstream gradient go?",
               Choice(options, 0),
               f"The max is not differentiable at a tie, and torch picks one subgradient: the first maximum it meets, "
               f"scanning row by row, here position {where}. Giving both the full gradient counts it twice; splitting "
               "it is what central differences would measure, but not what torch computes.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def batch_norm_inference_backward():
    gamma, running_var = np.array([3]).astype(np.float64), np.array([8])
    x = np.arange(4).reshape(4, 1).astype(np.float64)
    dx = bw.batch_norm_backward(x, np.zeros(1), running_var.astype(np.float64), gamma, np.ones((4, 1)), False, 1)[0]
    return Ask(f"BatchNorm in inference (eval mode), gamma = {gamma[0]:g}, running_var = {running_var[0]}, "
               "eps = 1, upstream dy = 1. What is dL/dx for any sample?",
               Number(float(dx[0, 0]), rel=0.01),
               f"In inference the running statistics are constants: y = gamma (x - mean) / sqrt(var + eps) + beta is "
               f"affine, so dx = dy * gamma / sqrt(var + eps) = {gamma[0]:g} / sqrt({running_var[0]} + 1) = "
               f"{dx[0, 0]:g}, the same for every sample. In training the batch statistics depend on x, and dx gains "
               "LayerNorm's two terms over the batch.")


@card(topic="autograd and compilers", difficulty="medium", frequency="medium", page=PAGE)
def batch_norm_training_couples_samples():
    x = (np.arange(8) ** 2).reshape(8, 1).astype(np.float64)
    dy = np.zeros((8, 1))
    dy[0] = 1
    trained = bw.batch_norm_backward(x, None, None, np.ones(1), dy, True)[0]
    inferred = bw.batch_norm_backward(x, np.zeros(1), np.ones(1), np.ones(1), dy, False)[0]
    reached = [int((np.abs(dx) > 10 ** -12).sum()) for dx in (trained, inferred)]
    options = ("every sample of the batch, in training; only sample 0, in inference",
               "only sample 0, in both modes",
               "every sample, in both modes",
               "only sample 0 in training; every sample in inference")
    return Ask("A BatchNorm layer gets an upstream gradient that is nonzero for sample 0 of the batch only. Which "
               "samples get a nonzero dL/dx?",
               Choice(options, 0),
               f"Training normalises by the batch's mean and variance, functions of every sample, so moving any x_j "
               f"moves y_0: {reached[0]} of 8 samples get a gradient. Inference uses the "
               f"running statistics, constants: {reached[1]} of 8. This coupling is also "
               "why BatchNorm misbehaves with tiny batches and in data parallelism without SyncBatchNorm.")
