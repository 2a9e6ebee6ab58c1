"""Dynamic loss scaling for fp16 training, as torch.amp.GradScaler does it, on plain state.

Mixed-precision training (Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3) keeps fp32
master weights, runs the forward and backward passes in fp16, and multiplies the loss by a scale S before the
backward pass so that small gradients land in fp16's range instead of flushing to zero (section 3.2). The
gradients then come out S times too large: they are unscaled in fp32 before the optimizer sees them. A scale
that is too large overflows some gradient to inf (or, through inf - inf, NaN): that step is skipped and the scale
lowered. The dynamic rule is torch's (torch/amp/grad_scaler.py; the CPU kernels `_amp_foreach_non_finite_check_
and_unscale_` and `_amp_update_scale_` in aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp):

- unscale: every gradient times inv_scale = float32(1 / float64(scale)), in float32; `found_inf` is true when any
  element of any gradient is not finite (+inf, -inf or NaN);
- update, after every step: if found_inf, scale *= backoff_factor and the growth tracker (consecutive good steps)
  goes back to 0; else the tracker counts the step, and when it reaches growth_interval the scale is multiplied by
  growth_factor (unless that would be inf in float32) and the tracker goes back to 0. The scale is a float32:
  each product is computed in float64 and rounded to float32.

A scaler is a plain dict {"scale", "growth_tracker", "growth_factor", "backoff_factor", "growth_interval"};
functions return new dicts. `aisys.parallel.fp16_model` builds a small fp16 model whose gradients overflow at the
initial scale 2^16 and underflow to zero without scaling, and trains it with a step such as `step` here.
"""

import math
from numbers import Real

import numpy as np

from .._validate import positive_int, positive_number

DEFAULT_INIT_SCALE = 2.0 ** 16  # torch.amp.GradScaler's defaults
DEFAULT_GROWTH_FACTOR = 2.0
DEFAULT_BACKOFF_FACTOR = 0.5
DEFAULT_GROWTH_INTERVAL = 2000
SCALER_KEYS = ("scale", "growth_tracker", "growth_factor", "backoff_factor", "growth_interval")


def new_scaler(init_scale=DEFAULT_INIT_SCALE, growth_factor=DEFAULT_GROWTH_FACTOR,
               backoff_factor=DEFAULT_BACKOFF_FACTOR, growth_interval=DEFAULT_GROWTH_INTERVAL) -> dict:
    """A scaler's state: the scale (a float32 value, held in a Python float) and no good steps yet."""
    positive_number("init_scale", init_scale)
    if isinstance(growth_factor, bool) or not isinstance(growth_factor, Real) or not growth_factor > 1:
        raise ValueError(f"growth_factor must be a number > 1, got {growth_factor!r}")
    if (isinstance(backoff_factor, bool) or not isinstance(backoff_factor, Real)
            or not 0 < backoff_factor < 1):
        raise ValueError(f"backoff_factor must be a number in (0, 1), got {backoff_factor!r}")
    return {"scale": float(np.float32(init_scale)), "growth_tracker": 0, "growth_factor": float(growth_factor),
            "backoff_factor": float(backoff_factor),
            "growth_interval": positive_int("growth_interval", growth_interval)}


def _scaler(scaler) -> dict:
    if not isinstance(scaler, dict) or set(scaler) != set(SCALER_KEYS):
        raise ValueError(f"scaler must be a dict with keys {', '.join(SCALER_KEYS)}, got {scaler!r}")
    positive_number("scaler['scale']", scaler["scale"])
    positive_int("scaler['growth_interval']", scaler["growth_interval"])
    tracker = scaler["growth_tracker"]
    if isinstance(tracker, bool) or not isinstance(tracker, int) or not 0 <= tracker < scaler["growth_interval"]:
        raise ValueError(f"scaler['growth_tracker'] must be an integer in [0, growth_interval), got {tracker!r}")
    return scaler


def _grads(grads) -> list[np.ndarray]:
    if not isinstance(grads, (list, tuple)) or not grads:
        raise ValueError(f"grads must be a non-empty list of float arrays, got {type(grads).__name__}")
    arrays = [np.asarray(g) for g in grads]
    for i, g in enumerate(arrays):
        if g.dtype.kind != "f":
            raise ValueError(f"grads[{i}] must be an array of floats, got {g.dtype}")
    return arrays


def unscale(grads, scale) -> tuple[list[np.ndarray], bool]:
    """(each gradient times float32(1 / scale), in float32; whether any element of any gradient is inf or NaN).

    The multiply is in float32, never fp16: 1/scale and the unscaled gradients are what underflows in fp16."""
    scale = positive_number("scale", scale)
    inv_scale = np.float32(1.0 / scale)  # torch: scale.double().reciprocal().float()
    arrays = _grads(grads)
    found_inf = any(not np.isfinite(g).all() for g in arrays)  # isfinite is false for +-inf and for NaN
    return [g.astype(np.float32) * inv_scale for g in arrays], bool(found_inf)


def update_scale(scaler, found_inf) -> dict:
    """The scaler after a step: backed off (tracker 0) if found_inf, else grown every growth_interval good steps."""
    scaler = _scaler(scaler)
    if not isinstance(found_inf, (bool, np.bool_)):
        raise ValueError(f"found_inf must be a bool, got {found_inf!r}")
    new = dict(scaler)
    if found_inf:
        new["scale"] = float(np.float32(scaler["scale"] * scaler["backoff_factor"]))
        new["growth_tracker"] = 0
        return new
    successful = scaler["growth_tracker"] + 1
    if successful == scaler["growth_interval"]:
        with np.errstate(over="ignore"):  # past float32's largest value the rounding gives inf, caught below
            grown = np.float32(scaler["scale"] * scaler["growth_factor"])  # float64 product, rounded to float32
        if math.isfinite(grown):  # never grow past float32's range to inf
            new["scale"] = float(grown)
        new["growth_tracker"] = 0
    else:
        new["growth_tracker"] = successful
    return new


def step(params, grads, scaler, lr) -> tuple[list[np.ndarray], dict, bool]:
    """One SGD step on float32 master weights with scaled gradients: (params, scaler, skipped).

    The gradients are unscaled and checked; if any is inf or NaN the step is skipped (the params come back
    unchanged) and the scale backs off; else params - lr * unscaled, in float32. The scaler is updated either way."""
    lr = positive_number("lr", lr)
    if not isinstance(params, (list, tuple)) or len(params) != len(grads):
        raise ValueError(f"params must be a list with one array per gradient ({len(grads)}), got {params!r}")
    masters = [np.asarray(p) for p in params]
    for i, (p, g) in enumerate(zip(masters, grads)):
        if p.dtype != np.float32 or p.shape != np.shape(g):
            raise ValueError(f"params[{i}] must be float32 of its gradient's shape {np.shape(g)}, got {p.dtype} "
                             f"of shape {p.shape}")
    unscaled, found_inf = unscale(grads, scaler["scale"])
    if found_inf:
        new_params = [p.copy() for p in masters]
    else:
        new_params = [p - np.float32(lr) * g for p, g in zip(masters, unscaled)]
    return new_params, update_scale(scaler, found_inf), found_inf
