"""AWQ (Lin et al. 2023, arXiv 2306.00978, section 3): activation-aware weight quantization's per-channel scale
search for one linear layer, and round-to-nearest to compare it with.

A weight W (out, C) reads calibration inputs X (tokens, C). Input channels with large activations are the salient
ones (section 3.1: keeping ~1% of them in FP16 recovers most of the accuracy); instead of mixed precision, AWQ
scales them up before quantizing: W' = Q(W * s) / s, where the / s is folded into whatever produced X (a norm's
gain, the previous layer), so the layer computes (X / s) Q(W * s)^T. Section 3.2's search, as in llm-awq's
`_search_module_scale` (github.com/mit-han-lab/llm-awq, awq/quantize/auto_scale.py):

- x_mean_j = mean |X_j| over every token (get_act_scale: the activation's magnitude, not the weight's);
- for ratio r = i / n_grid, i = 0 .. n_grid - 1 (n_grid = 20: r runs 0, 0.05, ..., 0.95), s = x_mean ** r
  clamped to >= 1e-4, then divided by sqrt(max(s) * min(s)) so that the scales straddle 1;
- the error of r is the mean squared difference of the outputs X W^T - X W'^T (the outputs, not the weights; the
  mean, as llm-awq takes it, picks the same r as the sum); the smallest error wins, the first on a tie (llm-awq
  keeps a new r only when its loss is strictly smaller).

At r = 0 every s is 1 (0 ** 0 = 1 as well), so W' is round-to-nearest's: the search can only do as well or better
than RTN on the calibration data. No gradient is involved: each r costs one quantization and one matmul.

Q is aisys.quant.affine's asymmetric group quantizer along the input channels (group_size consecutive columns of a
row, 4 bits: codes -8..7). llm-awq's pseudo_quantize_tensor uses codes 0..15 over the group's [min, max]; affine
widens the range to hold 0 (torchao's convention), so the two differ slightly on groups of one sign.
llm-awq then also searches a clipping range per group (auto_clip.py); that step is not reproduced here.
"""

from typing import NamedTuple

import numpy as np

from .._validate import finite_array, positive_int
from . import affine

N_GRID = 20  # _search_module_scale's n_grid
SCALE_MIN = 1e-4  # x_max.pow(ratio).clamp(min=1e-4)
GROUP_SIZE = 128  # llm-awq's q_group_size for its released models


class Search(NamedTuple):
    """The chosen ratio, its scales (float64, (C,)) and the output error of every ratio of the grid."""
    ratio: float
    scales: np.ndarray
    errors: np.ndarray


def _floats(name: str, value, ndim: int) -> np.ndarray:
    return finite_array(name, value, ndim=ndim, nonempty=True).astype(np.float64)


def _layer(weight, x) -> tuple[np.ndarray, np.ndarray]:
    weight, x = _floats("weight", weight, 2), _floats("x", x, 2)
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x must have shape (tokens, {weight.shape[1]}) to match weight (out, in), got {x.shape}")
    return weight, x


def activation_scale(x) -> np.ndarray:
    """mean |x| per input channel over every token: float64 of shape (C,)."""
    x = _floats("x", x, 2)
    return np.abs(x).mean(axis=0)


def grid_scales(x_mean, ratio: float) -> np.ndarray:
    """s = max(x_mean ** ratio, 1e-4) / sqrt(max(s) * min(s)), float64."""
    x_mean = _floats("x_mean", x_mean, 1)
    if (x_mean < 0).any():
        raise ValueError("x_mean must be >= 0 (a mean of absolute values)")
    if not 0 <= ratio <= 1:
        raise ValueError(f"ratio must be a number in [0, 1], got {ratio!r}")
    s = np.maximum(x_mean ** ratio, SCALE_MIN)
    return s / np.sqrt(s.max() * s.min())


def rtn(weight, *, bits: int = 4, group_size: int = GROUP_SIZE) -> np.ndarray:
    """Round-to-nearest: affine's asymmetric per-group fake quantization of `weight` (out, C), float32."""
    return affine.fake_quantize(_floats("weight", weight, 2), bits=bits, symmetric=False, granularity="group",
                                group_size=positive_int("group_size", group_size))


def quantize_scaled(weight, scales, *, bits: int = 4, group_size: int = GROUP_SIZE) -> np.ndarray:
    """Q(W * s) / s in float64: the layer's effective weight once X / s is folded upstream."""
    weight = _floats("weight", weight, 2)
    scales = _floats("scales", scales, 1)
    if scales.shape != (weight.shape[1],) or (scales <= 0).any():
        raise ValueError(f"scales must be {weight.shape[1]} numbers > 0 (one per input channel), got shape "
                         f"{scales.shape}")
    return rtn(weight * scales, bits=bits, group_size=group_size).astype(np.float64) / scales


def output_error(x, weight, quantized) -> float:
    """Mean squared difference of the outputs x W^T and x W'^T."""
    weight, x = _layer(weight, x)
    return float(np.mean((x @ weight.T - x @ _floats("quantized", quantized, 2).T) ** 2))


def search_scale(weight, x, *, bits: int = 4, group_size: int = GROUP_SIZE, n_grid: int = N_GRID) -> Search:
    """AWQ's grid search over r = i / n_grid (i = 0 .. n_grid - 1) for one layer: the least output error, the
    first on a tie."""
    weight, x = _layer(weight, x)
    n_grid = positive_int("n_grid", n_grid)
    x_mean = activation_scale(x)
    original = x @ weight.T  # once, as llm-awq's org_out: each ratio then costs one quantization and one matmul
    errors = []
    for i in range(n_grid):
        quantized = quantize_scaled(weight, grid_scales(x_mean, i / n_grid), bits=bits, group_size=group_size)
        errors.append(float(np.mean((original - x @ quantized.T) ** 2)))  # output_error, x @ weight.T kept
    best = int(np.argmin(errors))  # argmin returns the first of equal minima, as llm-awq's strict `<`
    return Search(best / n_grid, grid_scales(x_mean, best / n_grid), np.array(errors))


def awq_quantize(weight, inputs, *, bits: int = 4, group_size: int = GROUP_SIZE, n_grid: int = N_GRID) -> np.ndarray:
    """The dequantized weight AWQ gives a layer: Q(W * s) / s with the searched s, float32 of weight's shape.

    Equal to running (X / s) through Q(W * s), where X / s is folded into the layer before; `inputs` (tokens, C)
    are the layer's calibration inputs."""
    search = search_scale(weight, inputs, bits=bits, group_size=group_size, n_grid=n_grid)
    return quantize_scaled(weight, search.scales, bits=bits, group_size=group_size).astype(np.float32)
