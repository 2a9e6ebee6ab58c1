"""2-D average and max pooling of NCHW images, as gathers over aisys.conv.im2col's windows.

Both follow torch.nn.functional's geometry with ceil_mode=False: along each axis
out = floor((size + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, the stride
defaulting to the kernel size and the padding at most half the kernel (so that every
average has at least one pixel of the image to average). Average pooling divides by the
pixels of the image a window covers (count_include_pad=False: padding is not counted);
max pooling pads with -inf, so padding never wins a maximum.
"""

import numpy as np

from .._validate import nonnegative_int, positive_int
from ..conv import im2col, output_size


def _arguments(x, kernel_size, stride, padding, dilation=1):
    """Validated float x (B, C, H, W) and the ints k, s, p, d of a square window; the output must not be empty."""
    x = np.asarray(x)
    if x.ndim != 4 or x.dtype.kind != "f":
        raise ValueError(f"x must be a 4-D (B, C, H, W) float array, got shape {x.shape} and dtype {x.dtype}")
    k = positive_int("kernel_size", kernel_size)
    s = k if stride is None else positive_int("stride", stride)
    p, d = nonnegative_int("padding", padding), positive_int("dilation", dilation)
    if p > k // 2:
        raise ValueError(f"padding must be at most kernel_size // 2 = {k // 2} (as in PyTorch), got {p}")
    for size in x.shape[2:]:
        output_size(size, k, s, p, d)  # raises where no window fits
    return x, k, s, p, d


def _windows(x: np.ndarray, k: int, s: int, d: int) -> np.ndarray:
    """(B, C, k * k, OH, OW): every window's taps of an already padded x."""
    B, C, H, W = x.shape
    OH, OW = output_size(H, k, s, 0, d), output_size(W, k, s, 0, d)
    return im2col(x, k, s, 0, d).reshape(B, C, k * k, OH, OW)


def avg_pool2d(x, kernel_size: int, stride: int | None = None, padding: int = 0) -> np.ndarray:
    """Average pooling, count_include_pad=False and ceil_mode=False: (B, C, OH, OW) in x's dtype.

    Each output is the mean of the pixels of the image its k x k window covers; the zero padding only places the
    windows. The sum is taken in float64.
    """
    x, k, s, p, _ = _arguments(x, kernel_size, stride, padding)
    pad = ((0, 0), (0, 0), (p, p), (p, p))
    total = _windows(np.pad(x.astype(np.float64), pad), k, s, 1).sum(axis=2)
    count = _windows(np.pad(np.ones((1, 1) + x.shape[2:]), pad), k, s, 1).sum(axis=2)  # pixels of the image
    return (total / count).astype(x.dtype)


def max_pool2d(x, kernel_size: int, stride: int | None = None, padding: int = 0, dilation: int = 1) -> np.ndarray:
    """Max pooling, ceil_mode=False: (B, C, OH, OW) in x's dtype, the padding -inf (a window wholly in the padding,
    possible with a dilation, gives -inf)."""
    x, k, s, p, d = _arguments(x, kernel_size, stride, padding, dilation)
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    return _windows(padded, k, s, d).max(axis=2)
