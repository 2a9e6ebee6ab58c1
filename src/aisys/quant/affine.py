"""Affine (uniform) quantization: x ≈ (q - zero_point) * scale, with one (scale, zero_point) per block.

Every granularity is a block shape, as in torchao's `choose_qparams_affine`: per tensor the block is the whole
array, per channel one slice along axis 0 (a weight's output channel), per token one row of the last axis, per
group `group_size` consecutive elements of the last axis. The parameters have x's shape divided by the block's,
so a block's parameters sit at its index.

Conventions, all stated because libraries differ on each:
- codes are signed integers held in int8 (also for 4 bits or fewer). Symmetric mode uses
  [-(2**(bits-1) - 1), 2**(bits-1) - 1], dropping -2**(bits-1) so the range mirrors around 0 (-127..127 for int8);
  asymmetric mode uses the full [-2**(bits-1), 2**(bits-1) - 1] (-128..127).
- symmetric: scale = max|x| / qmax, zero_point 0. Asymmetric: the range [min(x.min(), 0), max(x.max(), 0)] holds 0
  so that 0 has an exact code; scale = (max - min) / (qmax - qmin); zero_point = qmin - round(min / scale), an
  integer in [qmin, qmax].
- statistics in float64; the scale is rounded to float32 (what is stored) and everything after uses that float32
  scale. A scale below float32's smallest normal number (an all-zero block) is raised to it, so nothing divides by 0.
- quantize rounds x / scale half to even (numpy and torch.round do), adds the zero point, then clamps.
"""

import numpy as np

from .._validate import finite_array, one_of, positive_int

GRANULARITIES = ("tensor", "channel", "token", "group")
SMALLEST_SCALE = float(np.finfo(np.float32).tiny)  # 2**-126


def int_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """(qmin, qmax) of the codes: symmetric drops the most negative code."""
    bits = positive_int("bits", bits)
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in [2, 8], got {bits}")
    qmax = 2 ** (bits - 1) - 1
    return (-qmax if symmetric else -qmax - 1), qmax


def block_size(shape: tuple[int, ...], granularity: str, group_size: int | None = None) -> tuple[int, ...]:
    """The block one (scale, zero_point) covers, for an array of `shape`."""
    one_of("granularity", granularity, GRANULARITIES)
    shape = tuple(shape)
    if not shape:
        raise ValueError("x must have at least one dimension, got a scalar")
    if granularity == "group":
        if group_size is None:
            raise ValueError("group_size must be given for granularity 'group'")
        group_size = positive_int("group_size", group_size)
        if shape[-1] % group_size:
            raise ValueError(f"group_size {group_size} must divide the last dimension, {shape[-1]}")
    elif group_size is not None:
        raise ValueError(f"group_size is only for granularity 'group', got {group_size!r} with {granularity!r}")
    ones = (1,) * (len(shape) - 1)
    return {
        "tensor": shape,
        "channel": (1, *shape[1:]),
        "token": (*ones, shape[-1]),
        "group": (*ones, group_size),
    }[granularity]


def _blocks(x: np.ndarray, block: tuple[int, ...]) -> np.ndarray:
    """x viewed as (n0, b0, n1, b1, ...): block index and offset inside the block, per axis."""
    return x.reshape([d for n, b in zip(x.shape, block) for d in (n // b, b)])


def expand(params, shape: tuple[int, ...]) -> np.ndarray:
    """Per-block parameters repeated to every element of an array of `shape`."""
    params = np.asarray(params)
    if params.ndim != len(shape) or any(n == 0 or d % n for d, n in zip(shape, params.shape)):
        raise ValueError(f"parameters of shape {params.shape} do not tile an array of shape {tuple(shape)}")
    for axis, (d, n) in enumerate(zip(shape, params.shape)):
        params = np.repeat(params, d // n, axis=axis)
    return params


def choose_qparams(x, *, bits: int = 8, symmetric: bool = True, granularity: str = "tensor",
                   group_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero_point int32), one per block, of shape x.shape // block (see the module's rules)."""
    x = finite_array("x", x).astype(np.float64)
    qmin, qmax = int_range(bits, symmetric)
    block = block_size(x.shape, granularity, group_size)
    if x.size == 0:
        raise ValueError(f"x must hold at least one element, got shape {x.shape}")
    grouped = _blocks(x, block)
    inner = tuple(range(1, grouped.ndim, 2))  # the offsets inside a block
    if symmetric:
        scale = np.abs(grouped).max(axis=inner) / qmax
    else:
        low = np.minimum(grouped.min(axis=inner), 0.0)
        scale = (np.maximum(grouped.max(axis=inner), 0.0) - low) / (qmax - qmin)
    scale = np.maximum(scale.astype(np.float32), np.float32(SMALLEST_SCALE))
    if symmetric:
        zero_point = np.zeros(scale.shape, np.int32)
    else:
        zero_point = np.clip(qmin - np.round(low / scale.astype(np.float64)), qmin, qmax).astype(np.int32)
    return scale, zero_point


def quantize(x, scale, zero_point, *, bits: int = 8, symmetric: bool = True) -> np.ndarray:
    """int8 codes clamp(round(x / scale) + zero_point, qmin, qmax), with per-block parameters."""
    x = finite_array("x", x).astype(np.float64)
    qmin, qmax = int_range(bits, symmetric)
    scale, zero_point = _checked_params(scale, zero_point, qmin, qmax)
    codes = np.round(x / expand(scale, x.shape).astype(np.float64)) + expand(zero_point, x.shape)
    return np.clip(codes, qmin, qmax).astype(np.int8)


def dequantize(q, scale, zero_point) -> np.ndarray:
    """(q - zero_point) * scale in float32, with per-block parameters; the subtraction in int32, not int8."""
    q = np.asarray(q)
    if q.dtype != np.int8:
        raise ValueError(f"q must be an int8 array of codes, got {q.dtype}")
    scale, zero_point = _checked_params(scale, zero_point, -128, 127)
    return (q.astype(np.int32) - expand(zero_point, q.shape)).astype(np.float32) * expand(scale, q.shape)


def fake_quantize(x, *, bits: int = 8, symmetric: bool = True, granularity: str = "tensor",
                  group_size: int | None = None) -> np.ndarray:
    """x quantized and dequantized with parameters chosen from x itself (round to nearest), in float32."""
    scale, zero_point = choose_qparams(x, bits=bits, symmetric=symmetric, granularity=granularity,
                                       group_size=group_size)
    return dequantize(quantize(x, scale, zero_point, bits=bits, symmetric=symmetric), scale, zero_point)


def _checked_params(scale, zero_point, qmin: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    scale, zero_point = np.asarray(scale), np.asarray(zero_point)
    if scale.dtype != np.float32 or not (np.isfinite(scale) & (scale > 0)).all():
        raise ValueError(f"scale must be float32 values, finite and > 0, got {scale.dtype} of shape {scale.shape}")
    if zero_point.dtype.kind not in "iu" or ((zero_point < qmin) | (zero_point > qmax)).any():
        raise ValueError(f"zero_point must hold integers in [{qmin}, {qmax}], got {zero_point.dtype} "
                         f"of shape {zero_point.shape}")
    if scale.shape != zero_point.shape:
        raise ValueError(f"scale {scale.shape} and zero_point {zero_point.shape} must have one shape")
    return scale, zero_point
