"""int8 affine quantization: q = clamp(round(x / scale) + zero_point), per tensor or per channel, with every
rounding and range stated (round half to even, as torch.quantize_per_tensor and numpy's round do)."""

import numpy as np

from .._validate import one_of

SYMMETRIC_RANGE, ASYMMETRIC_RANGE = (-127, 127), (-128, 127)  # symmetric drops -128: the range mirrors around 0


def _real(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind != "f" or not np.isfinite(array).all():
        raise ValueError(f"{name} must be a finite float array, got {array.dtype} of shape {array.shape}")
    return array


def _params(scale, zero_point) -> tuple[np.ndarray, np.ndarray]:
    scale, zero_point = np.asarray(scale), np.asarray(zero_point)
    if scale.dtype.kind != "f" or not (np.isfinite(scale) & (scale > 0)).all():
        raise ValueError(f"scale must hold finite floats > 0, got {scale.dtype} {scale!r:.80}")
    if zero_point.dtype.kind not in "iu" or ((zero_point < -128) | (zero_point > 127)).any():
        raise ValueError(f"zero_point must hold integers in [-128, 127], got {zero_point.dtype} {zero_point!r:.80}")
    return scale.astype(np.float64), zero_point.astype(np.int64)


def quantize(x, scale, zero_point, symmetric: bool = False) -> np.ndarray:
    """int8 codes clamp(round(x / scale) + zero_point, -128 or -127, 127): x / scale in float64, rounded half to
    even; `symmetric` clamps to [-127, 127]. scale (float32) and zero_point (integers) broadcast against x."""
    x = _real("x", x).astype(np.float64)
    scale, zero_point = _params(scale, zero_point)
    low, high = SYMMETRIC_RANGE if symmetric else ASYMMETRIC_RANGE
    return np.clip(np.round(x / scale) + zero_point, low, high).astype(np.int8)


def dequantize(q, scale, zero_point) -> np.ndarray:
    """(q - zero_point) * scale as float32, from int8 codes q; the subtraction in integers wider than int8."""
    q = np.asarray(q)
    if q.dtype != np.int8:
        raise ValueError(f"q must be an int8 array, got {q.dtype}")
    scale, zero_point = _params(scale, zero_point)
    return ((q.astype(np.int64) - zero_point) * scale).astype(np.float32)


def choose_params(x, mode: str = "symmetric", axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero_point int32) for x: one pair for the tensor (axis None) or one per index along `axis`,
    of the shape that broadcasts against x (x's dimensions, 1 everywhere but `axis`).

    symmetric: scale = max|x| / 127, zero_point 0. asymmetric: the range [min(x.min(), 0), max(x.max(), 0)] (it
    holds 0, so 0 has an exact code), scale = (max - min) / 255, zero_point = -128 - round(min / scale) with the
    float64 scale, rounded half to even. Where the range is only 0 (all zeros), scale is 1. In float64, the
    scale rounded to float32 last.
    """
    x = _real("x", x).astype(np.float64)
    one_of("mode", mode, ("symmetric", "asymmetric"))
    if x.size == 0 or x.ndim == 0:
        raise ValueError(f"x must have at least one dimension and one element, got shape {x.shape}")
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < x.ndim:
            raise ValueError(f"axis must be None or an integer in [{-x.ndim}, {x.ndim}), got {axis!r}")
        axis = int(axis) % x.ndim
    reduced = tuple(i for i in range(x.ndim) if i != axis)  # every axis but the channel's
    if mode == "symmetric":
        scale = np.abs(x).max(axis=reduced, keepdims=True) / 127
    else:
        low = np.minimum(x.min(axis=reduced, keepdims=True), 0.0)
        high = np.maximum(x.max(axis=reduced, keepdims=True), 0.0)
        scale = (high - low) / 255
    scale = np.where(scale == 0, 1.0, scale)  # an all-zero tensor (or channel)
    zero_point = np.zeros_like(scale) if mode == "symmetric" else -128 - np.round(low / scale)
    return scale.astype(np.float32), zero_point.astype(np.int32)
