"""FP8 scaling: E4M3 and E5M2 encoding with saturation, delayed per-tensor scaling with an amax history
(Transformer Engine's recipe) and per-block scaling (DeepSeek-V3's 1 x 128 activation tiles and 128 x 128 weight
blocks).

Conventions, all stated:
- formats (Micikevicius et al. 2022, arXiv 2209.05433, table 1): E4M3 is torch.float8_e4m3fn (bias 7, largest
  normal 448, no infinity, one NaN pattern per sign: S.1111.111); E5M2 is torch.float8_e5m2 (bias 15, largest 57344,
  IEEE-like, with infinities). Encoding rounds to nearest, ties to even; codes are the uint8 bit patterns.
- saturation: values are clipped to [-max, max] BEFORE the cast, as Transformer Engine does, so nothing overflows
  to infinity or NaN. (torch 2.13's CPU cast to float8_e4m3fn already saturates, infinity included; its cast to
  float8_e5m2 does not: 61440 becomes inf. Earlier versions are reported to give NaN for E4M3, not checked here; we
  rely on neither.)
- the scale multiplies: codes = cast(saturate(x * scale)), and x ≈ decode(codes) / scale. x * scale is rounded to
  float32 first (x and scale are float32), then saturated, then cast.
- scale = fp8_max / amax / 2**margin, rounded to float32; where amax is 0 the scale stays what it was (1 at first),
  as Transformer Engine's `_default_sf_compute` does.
- delayed scaling, step t: cast x_t with the scale computed after step t-1 (1 at the first step: empty history);
  then append amax_t = max|x_t| to the history, keep its last `window` entries, and set the scale for step t+1 from
  amax = max(history). A spike at step t thus lowers the scales of steps t+1 .. t+window: exactly `window` steps.
- per block: one scale per block of shape (block_rows, block_cols) of a 2-d x, from the block's own amax (no
  history); the scales have shape (rows / block_rows, cols / block_cols). DeepSeek-V3 (arXiv 2412.19437, section
  3.3.2) uses 1 x 128 tiles for activations and 128 x 128 blocks for weights.
"""

import numpy as np
import torch

from .._validate import nonnegative_int, one_of, positive_int

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def _float32(name: str, value, ndim: int | None = None) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.float32 or not np.isfinite(array).all() or (ndim is not None and array.ndim != ndim):
        shape = f"{ndim}-d " if ndim is not None else ""
        raise ValueError(f"{name} must be a {shape}float32 array of finite values, got {array.dtype} of shape "
                         f"{array.shape}")
    return array


def encode(x, fmt: str = "e4m3") -> np.ndarray:
    """uint8 bit patterns of float32 x, saturated to [-max, max] and rounded to nearest even."""
    one_of("fmt", fmt, tuple(FORMATS))
    x = np.clip(_float32("x", x), -MAX[fmt], MAX[fmt])
    return torch.from_numpy(np.ascontiguousarray(x)).to(FORMATS[fmt]).view(torch.uint8).numpy()


def decode(codes, fmt: str = "e4m3") -> np.ndarray:
    """float32 values of uint8 FP8 bit patterns."""
    one_of("fmt", fmt, tuple(FORMATS))
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise ValueError(f"codes must be a uint8 array of bit patterns, got {codes.dtype}")
    return torch.from_numpy(np.ascontiguousarray(codes)).view(FORMATS[fmt]).float().numpy()


def scale_for(amax: float, fmt: str = "e4m3", margin: int = 0, previous: float = 1.0) -> np.float32:
    """fp8_max / amax / 2**margin as float32; `previous` where amax is 0."""
    one_of("fmt", fmt, tuple(FORMATS))
    margin = nonnegative_int("margin", margin)
    if not amax > 0:
        return np.float32(previous)
    return np.float32(MAX[fmt] / float(amax) / 2.0 ** margin)


def quantize(x, scale, fmt: str = "e4m3") -> np.ndarray:
    """Codes of x * scale (float32 product), saturated: scale a float32 broadcasting against x."""
    x = _float32("x", x)
    scale = np.asarray(scale, dtype=np.float32)
    return encode((x * scale).astype(np.float32), fmt)


def delayed_scaling(xs, fmt: str = "e4m3", window: int = 16, margin: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-tensor delayed scaling over steps xs[0], xs[1], ...: (codes uint8 of xs's shape, the scale each step
    used, float32 of shape (steps,))."""
    xs = _float32("xs", xs)
    if xs.ndim < 1 or xs.shape[0] == 0:
        raise ValueError(f"xs must hold at least one step along axis 0, got shape {xs.shape}")
    window = positive_int("window", window)
    history: list[float] = []
    scale = np.float32(1.0)
    codes, scales = [], []
    for x in xs:
        codes.append(quantize(x, scale, fmt))  # with the scale from earlier steps
        scales.append(scale)
        history = (history + [float(np.abs(x).max(initial=0.0))])[-window:]
        scale = scale_for(max(history), fmt, margin, previous=scale)
    return np.stack(codes), np.array(scales, dtype=np.float32)


def blocks(shape: tuple[int, ...], block) -> tuple[int, int]:
    """(block_rows, block_cols), checked to tile a 2-d shape."""
    if len(shape) != 2:
        raise ValueError(f"x must be 2-d, got shape {tuple(shape)}")
    if np.ndim(block) != 1 or len(block) != 2:
        raise ValueError(f"block must be a pair (block_rows, block_cols), got {block!r}")
    rows, cols = (positive_int("block", b) for b in block)
    if shape[0] % rows or shape[1] % cols:
        raise ValueError(f"block {(rows, cols)} must divide the shape of x, {tuple(shape)}")
    return rows, cols


def quantize_blockwise(x, block=(128, 128), fmt: str = "e4m3") -> tuple[np.ndarray, np.ndarray]:
    """(codes uint8 of x's shape, scales float32 of shape (rows / block_rows, cols / block_cols)): one scale per
    block, fp8_max / (the block's amax), 1 for an all-zero block."""
    x = _float32("x", x, ndim=2)
    rows, cols = blocks(x.shape, block)
    one_of("fmt", fmt, tuple(FORMATS))
    amax = np.abs(x).reshape(x.shape[0] // rows, rows, x.shape[1] // cols, cols).max(axis=(1, 3))
    scales = np.array([[scale_for(a, fmt) for a in row] for row in amax], dtype=np.float32).reshape(amax.shape)
    full = np.repeat(np.repeat(scales, rows, axis=0), cols, axis=1)
    return quantize(x, full, fmt), scales


def dequantize_blockwise(codes, scales, fmt: str = "e4m3") -> np.ndarray:
    """decode(codes) / scale per block, float32."""
    values = decode(codes, fmt)
    scales = np.asarray(scales, dtype=np.float32)
    rows, cols = values.shape[0] // scales.shape[0], values.shape[1] // scales.shape[1]
    return values / np.repeat(np.repeat(scales, rows, axis=0), cols, axis=1)
