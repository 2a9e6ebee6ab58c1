"""Bilinear resizing of NCHW images, as torch.nn.functional.interpolate(mode="bilinear") defines it.

Output row i (and column, alike) reads the input at a source coordinate src:

    align_corners=True:   src = i * (in - 1) / (out - 1)             (0 when out == 1)
    align_corners=False:  src = max((i + 0.5) * in / out - 0.5, 0)   (half-pixel centres, clamped at 0)

and interpolates linearly between rows i0 = floor(src) and i1 = min(i0 + 1, in - 1) with weight
src - i0 on i1. Bilinear is that, along H and then along W (the weights multiply).
"""

import numpy as np

from .._validate import positive_int


def _source(n_in: int, n_out: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows i0, i1 each output reads along one axis, and the weight of i1."""
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0)  # clamped: the first half pixel reads row 0
    i0 = np.floor(src).astype(np.int64)
    return i0, np.minimum(i0 + 1, n_in - 1), src - i0


def resize_bilinear(x, size, align_corners: bool = False) -> np.ndarray:
    """x (B, C, H, W) resized to size = (out_h, out_w) bilinearly, as torch.nn.functional.interpolate: the result
    has x's dtype and is computed in float64."""
    x = np.asarray(x)
    if x.ndim != 4 or x.dtype.kind != "f":
        raise ValueError(f"x must be a 4-D (B, C, H, W) float array, got shape {x.shape} and dtype {x.dtype}")
    if not (isinstance(size, (tuple, list)) and len(size) == 2):
        raise ValueError(f"size must be a pair (out_h, out_w), got {size!r}")
    out_h, out_w = positive_int("size[0]", size[0]), positive_int("size[1]", size[1])
    if not isinstance(align_corners, (bool, np.bool_)):
        raise TypeError(f"align_corners must be True or False, got {align_corners!r}")
    (r0, r1, wy), (c0, c1, wx) = _source(x.shape[2], out_h, align_corners), _source(x.shape[3], out_w, align_corners)
    x64 = x.astype(np.float64)
    rows = x64[:, :, r0] * (1 - wy)[:, None] + x64[:, :, r1] * wy[:, None]  # (B, C, out_h, W)
    return (rows[..., c0] * (1 - wx) + rows[..., c1] * wx).astype(x.dtype)
