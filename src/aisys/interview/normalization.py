"""LayerNorm forward and backward, and LayerNorm with a Newton square root: the references the chapter 9 drills grade.

LayerNorm (Ba, Kiros & Hinton 2016) normalises each row (the last axis, N elements) by its own mean and *biased*
variance (divided by N, as torch.nn.LayerNorm does), eps inside the square root, then scales and shifts each column:

    mean = sum(x) / N        var = sum((x - mean)^2) / N        xhat = (x - mean) / sqrt(var + eps)
    y = xhat * gamma + beta

Everything is computed in float64, the variance in two passes (distances from the mean, never E[x^2] - E[x]^2, which
cancels when the mean is large against the spread); layer_norm rounds its result once, to x's dtype. (The Triton
LayerNorm of chapter 2, aisys.triton_kernels.layernorm, is the same function on a GPU, with float32 statistics.)
"""

import numpy as np

from aisys._validate import nonnegative_int, positive_number


def _rows(name: str, x, dtypes=(np.float32, np.float64)) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype not in dtypes or x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must be an array of {' or '.join(np.dtype(d).name for d in dtypes)} whose last "
                         f"axis has at least one element, got {getattr(x, 'dtype', type(x).__name__)} of shape "
                         f"{getattr(x, 'shape', None)}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must hold finite numbers")
    return x


def _columns(name: str, value, n: int) -> np.ndarray:
    """A per-column parameter: n finite numbers, as float64."""
    value = np.asarray(value)
    if value.shape != (n,) or value.dtype.kind != "f" or not np.isfinite(value).all():
        raise ValueError(f"{name} must hold {n} finite floats, one per column (shape ({n},)); got "
                         f"{value.dtype} of shape {value.shape}")
    return value.astype(np.float64)


def _statistics(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean and biased variance, float64, two passes; shapes (..., 1)."""
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    return mean, ((x - mean) ** 2).mean(axis=-1, keepdims=True)


def layer_norm(x, gamma, beta, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm of x (..., N) over its last axis with gamma and beta (N,), in float64, rounded to x's dtype.

    A constant row (variance 0) gives beta: eps > 0 keeps the division defined.
    """
    x = _rows("x", x)
    gamma, beta = _columns("gamma", gamma, x.shape[-1]), _columns("beta", beta, x.shape[-1])
    eps = positive_number("eps", eps)
    mean, var = _statistics(x)
    return ((x - mean) / np.sqrt(var + eps) * gamma + beta).astype(x.dtype)


def layer_norm_backward(x, gamma, dy, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dx, dgamma, dbeta) of y = layer_norm(x, gamma, beta, eps) for x (M, N), given dy = dL/dy (M, N).

    With xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), and g = dy * gamma (the gradient reaching xhat):

        dbeta = sum over rows of dy        dgamma = sum over rows of dy * xhat
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (means over each row)

    The two subtracted terms are the paths through the mean and through the variance: every element of a row moves
    its mean and its variance, and so every other element's xhat. All in float64.
    """
    x = _rows("x", x, (np.float64,))
    if x.ndim != 2:
        raise ValueError(f"x must be an (M, N) array, got shape {x.shape}")
    gamma = _columns("gamma", gamma, x.shape[1])
    dy = np.asarray(dy)
    if dy.shape != x.shape or dy.dtype.kind != "f" or not np.isfinite(dy).all():
        raise ValueError(f"dy must hold finite floats of x's shape {x.shape}, got {dy.dtype} of shape {dy.shape}")
    eps = positive_number("eps", eps)
    mean, var = _statistics(x)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def sqrt_newton(x, iterations: int) -> np.ndarray:
    """sqrt(x) for x > 0 by Newton's method on y^2 = x, elementwise in float64: `iterations` steps of
    y <- (y + x / y) / 2 from y0 = (1 + x) / 2 (the first step from y = 1; y0 >= sqrt(x), and every step after
    stays above it and comes closer). Few steps give a value above the true square root: exactly these steps."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or not np.isfinite(x).all() or (x <= 0).any():
        raise ValueError(f"x must hold finite floats > 0, got {x.dtype} of shape {x.shape}")
    iterations = nonnegative_int("iterations", iterations)
    x = x.astype(np.float64)
    y = (1 + x) / 2
    for _ in range(iterations):
        y = (y + x / y) / 2
    return y


def layer_norm_newton(x, gamma, beta, eps: float, iterations: int) -> np.ndarray:
    """layer_norm in float64 with 1 / sqrt_newton(var + eps, iterations) for 1 / sqrt(var + eps): the same function
    as iterations grows, and exactly what `iterations` Newton steps give before."""
    x = _rows("x", x, (np.float64,))
    gamma, beta = _columns("gamma", gamma, x.shape[-1]), _columns("beta", beta, x.shape[-1])
    eps = positive_number("eps", eps)
    mean, var = _statistics(x)
    return (x - mean) * (1 / sqrt_newton(var + eps, iterations)) * gamma + beta
