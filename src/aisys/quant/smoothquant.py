"""SmoothQuant (Xiao et al. 2023, arXiv 2211.10438, section 4): per-channel smoothing scales that move activation
outliers into the weights, and the W8A8 layer they are meant for.

One activation X (tokens, C) leaves a normalisation (LayerNorm or RMSNorm, gain gamma of shape (C,)) and feeds one
or more linear layers W_i (out_i, C) (attention's q, k and v read the same X). For each input channel j

    s_j = max|X_j| ** alpha / max_i max_o |W_i[o, j]| ** (1 - alpha)

and X W_i^T = (X / s) (W_i * s)^T exactly: X / s is folded into the norm (gamma / s, and its bias / s for
LayerNorm), W_i * s multiplies column j of every W_i, so nothing is added at run time. As in the original
`smooth_ln_fcs` (github.com/mit-han-lab/smoothquant, smoothquant/smooth.py):
- the weight maximum is over every layer that reads X (the concatenated weights), per input channel (axis 0 of a
  (out, C) weight is reduced, not axis 1);
- the weight maximum is clamped to >= 1e-5, and so are the scales (a zero activation channel gives s = 0 for
  alpha > 0 before the clamp); the activation maximum is not clamped (0 ** 0 = 1 at alpha = 0);
- act_max is the per-channel max |X| over calibration tokens (smoothquant/calibration.py, get_act_scales).

alpha = 0 leaves the activations alone relative to the weights (s = 1 / weight max: every weight column's max
becomes 1 and the activations carry all the range); alpha = 1 gives s = act_max, so every channel of X / s has
max 1 and the weights carry all of it. The paper uses 0.5 for most models (section 4, "migration strength").

W8A8 follows smoothquant/fake_quant.py's W8A8Linear(act_quant="per_token") with per-channel weights: symmetric
int8, activations one scale per token (row), weights one scale per output channel, fake-quantized with
aisys.quant.affine (whose scale floor is float32's smallest normal, where fake_quant.py clamps max|x| to 1e-5).
Everything is computed in float64; the scales are float64.
"""

from typing import NamedTuple

import numpy as np

from .._validate import finite_array, nonnegative_number, positive_number
from . import affine

CLAMP = 1e-5  # smooth_ln_fcs: weight_scales.clamp(min=1e-5) and scales.clamp(min=1e-5)


class Smoothed(NamedTuple):
    """A smoothed norm and the layers after it: gain / s, bias / s (None for RMSNorm), each W * s, and s."""
    gain: np.ndarray
    bias: np.ndarray | None
    weights: list[np.ndarray]
    scales: np.ndarray


def _floats(name: str, value, ndim: int) -> np.ndarray:
    return finite_array(name, value, ndim=ndim, kinds="fiu").astype(np.float64)


def _weights(weights, channels: int | None = None) -> list[np.ndarray]:
    """A list of (out_i, C) float64 weights, C = `channels` (that of the first weight when None)."""
    if isinstance(weights, np.ndarray) and weights.ndim == 2:
        weights = [weights]
    if not isinstance(weights, (list, tuple)) or not weights:
        raise ValueError(f"weights must be a non-empty list of (out, C) arrays, got {type(weights).__name__}")
    checked = [_floats(f"weights[{i}]", w, 2) for i, w in enumerate(weights)]
    channels = checked[0].shape[1] if channels is None else channels
    for i, w in enumerate(checked):
        if w.shape[1] != channels:
            raise ValueError(f"weights[{i}] must have {channels} input channels (shape (out, {channels})), "
                             f"got shape {w.shape}")
    return checked


def _alpha(alpha) -> float:
    alpha = nonnegative_number("alpha", alpha)
    if alpha > 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return alpha


def act_max(x) -> np.ndarray:
    """Calibration: max |x| per channel (last axis) over every token, float64 (get_act_scales)."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim < 1 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"x must be a non-empty array of finite floats, got {x.dtype} of shape {x.shape}")
    return np.abs(x.astype(np.float64)).reshape(-1, x.shape[-1]).max(axis=0)


def weight_max(weights) -> np.ndarray:
    """max |W[o, j]| per input channel j over every output row of every layer, clamped to >= 1e-5."""
    weights = _weights(weights)
    return np.maximum(np.max([np.abs(w).max(axis=0) for w in weights], axis=0), CLAMP)


def smoothing_scales(act_max, weights, alpha: float = 0.5) -> np.ndarray:
    """s_j = act_max_j ** alpha / weight_max_j ** (1 - alpha), clamped to >= 1e-5, float64 of shape (C,).

    act_max: (C,) max |X| per channel; weights: the (out_i, C) weights of every layer that reads X."""
    amax = _floats("act_max", act_max, 1)
    if (amax < 0).any():
        raise ValueError("act_max must be >= 0 (a maximum of absolute values)")
    alpha = _alpha(alpha)
    wmax = weight_max(_weights(weights, amax.shape[0]))  # validated against act_max's C first
    return np.maximum(amax ** alpha / wmax ** (1 - alpha), CLAMP)


def smooth(gain, bias, weights, scales) -> Smoothed:
    """Fold X / s into the norm (gain / s, bias / s; bias None for RMSNorm) and W * s into each layer's columns."""
    gain = _floats("gain", gain, 1)
    channels = gain.shape[0]
    scales = _floats("scales", scales, 1)
    if scales.shape != (channels,) or (scales <= 0).any():
        raise ValueError(f"scales must be {channels} numbers > 0, got shape {scales.shape}")
    if bias is not None:
        bias = _floats("bias", bias, 1)
        if bias.shape != (channels,):
            raise ValueError(f"bias must have shape ({channels},) like gain, got {bias.shape}")
        bias = bias / scales
    return Smoothed(gain / scales, bias, [w * scales for w in _weights(weights, channels)], scales)


def norm(x, gain, bias=None, *, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis when `bias` is given, RMSNorm when it is None; gain (and bias) per channel."""
    x = _floats("x", x, 2)
    eps = positive_number("eps", eps)
    gain = _floats("gain", gain, 1)
    if bias is None:
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gain
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps) * gain + _floats("bias", bias, 1)


def fake_quantize_weight(weight) -> np.ndarray:
    """Symmetric int8, one scale per output channel (row of a (out, in) weight), dequantized to float32."""
    return affine.fake_quantize(_floats("weight", weight, 2), bits=8, symmetric=True, granularity="channel")


def w8a8_linear(x, weight) -> np.ndarray:
    """X W^T with X fake-quantized per token and W per output channel, both symmetric int8; float64 (tokens, out)."""
    x = _floats("x", x, 2)
    weight = _floats("weight", weight, 2)
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"weight must have shape (out, {x.shape[1]}) to match x, got {weight.shape}")
    xq = affine.fake_quantize(x, bits=8, symmetric=True, granularity="token").astype(np.float64)
    return xq @ fake_quantize_weight(weight).astype(np.float64).T


def w8a8_error(x, weights) -> float:
    """Mean squared error of the W8A8 outputs against the float64 outputs x W^T, over every layer in `weights`."""
    x = _floats("x", x, 2)
    weights = _weights(weights, x.shape[1])
    return float(np.mean(np.concatenate([((w8a8_linear(x, w) - x @ w.T) ** 2).ravel() for w in weights])))


def smooth_and_quantize(gain, weights, act_max, alpha: float = 0.5, bias=None) -> Smoothed:
    """The whole step for one norm and the layers reading it: scales from calibration `act_max`, folded into the
    norm, and every smoothed weight fake-quantized to int8 per output channel (float32, (out_i, C) each).

    The returned gain (and bias) replace the norm's, in float64; run activations through the new norm and
    quantize them per token (w8a8_linear does both halves on a given activation)."""
    scales = smoothing_scales(act_max, weights, alpha)
    smoothed = smooth(gain, bias, weights, scales)
    return smoothed._replace(weights=[fake_quantize_weight(w) for w in smoothed.weights])
