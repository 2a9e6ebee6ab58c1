# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a dynamic loss scaler
#
# **You will learn** to train in fp16 without losing the small gradients or the step to an overflow, as
# `torch.amp.GradScaler` does: multiply the loss by a scale S so that small gradients stay above fp16's smallest
# subnormal (2^-24), unscale the gradients in float32, skip the step whose gradients overflowed, and adjust S as
# training goes (Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3.2). You then train a real
# fp16 model whose gradients overflow at the initial scale 2^16 and flush to zero without a scale.
#
# **The conventions, all of them** (torch's: `torch/amp/grad_scaler.py` and its CPU kernels
# `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`; the checks compare with
# `torch._amp_update_scale_` itself, exactly):
# - **A scaler** is a dict `{"scale": float, "growth_tracker": int, "growth_factor": float, "backoff_factor": float,
#   "growth_interval": int}`, made by the provided `new_scaler` (torch's defaults: scale 2^16, growth 2, back-off
#   0.5, interval 2000). `growth_tracker` counts the consecutive good steps since the scale last changed. Functions
#   return a **new** dict with the same five keys; never change the one passed in.
# - **The scale is a float32 value** (torch holds it in a float32 tensor), kept in a Python float: every new scale
#   is `float(np.float32(scale * factor))`, the product taken in float64 then rounded to float32.
# - **`unscale_grads(grads, scale)`**: `grads` is a list of float arrays (fp16 or float32). Return `[unscaled,
#   found_inf]`: `unscaled` is a list of **float32** arrays, each `float32(grad) * inv_scale` with `inv_scale =
#   np.float32(1 / scale)` (the reciprocal in float64, rounded to float32), multiplied in float32, never in fp16
#   (2^16 is inf in fp16, and the unscaled gradients are exactly what fp16 cannot hold); `found_inf` is a bool,
#   True when **any** element of **any** gradient is +inf, -inf or NaN. Non-finite elements are unscaled like the
#   others (inf stays inf, NaN stays NaN).
# - **`update_scale(scaler, found_inf)`**: if `found_inf`, the scale is multiplied by `backoff_factor` and the
#   tracker goes back to 0. Else the tracker counts this good step; when it **reaches** `growth_interval`, the scale
#   is multiplied by `growth_factor` and the tracker goes back to 0, but if that product is inf in float32 the scale
#   stays as it was (the tracker still goes back to 0). With `growth_interval = n` the scale so grows after every n
#   consecutive good steps: on the n-th, not the (n+1)-th.
# - **`scaler_step(params, grads, scaler, lr)`**: one SGD step on the float32 master weights `params` (a list of
#   float32 arrays, one per gradient, of its shape) with the **scaled** gradients `grads`. Unscale and check; if
#   `found_inf`, skip the step: the params come back unchanged (equal copies). Else each param becomes
#   `p - np.float32(lr) * unscaled`, in float32. Update the scaler with `found_inf` either way. Return
#   `[params, scaler, skipped]`, `skipped` a bool (= `found_inf`).
# - **The model** (section 4, provided by `aisys.parallel.fp16_model`): one linear layer in fp16 whose first
#   gradients are of order 10 (times 2^16, past fp16's largest value 65504) and whose last ones are below 2^-24. Its
#   check trains it with your `scaler_step`, step by step, and compares the scales, the skipped steps and the final
#   weights with the reference scaler's.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import numpy as np

from aisys.parallel import fp16_model
from aisys_grader import checker

check = checker("05-parallel-training/loss_scaler", globals())


def new_scaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
    """A scaler's state, torch.amp.GradScaler's defaults: the scale (a float32 value) and no good steps yet."""
    return {"scale": float(np.float32(init_scale)), "growth_tracker": 0, "growth_factor": float(growth_factor),
            "backoff_factor": float(backoff_factor), "growth_interval": int(growth_interval)}


# %% [markdown]
# ## 1. Unscale, and look for inf and NaN

# %% tags=["solution"]
def unscale_grads(grads, scale):
    """[float32 gradients times float32(1/scale), whether any element of any gradient is inf or NaN]."""
    ### BEGIN SOLUTION
    inv_scale = np.float32(1.0 / scale)
    found_inf = False
    unscaled = []
    for grad in grads:
        grad = np.asarray(grad)
        if not np.isfinite(grad).all():  # false for +inf, -inf and NaN alike
            found_inf = True
        unscaled.append(grad.astype(np.float32) * inv_scale)
    return [unscaled, found_inf]
    ### END SOLUTION


# %% tags=["check"]
check("unscale_grads")
### BEGIN HIDDEN TESTS
check("unscale_grads", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Back off, or grow

# %% tags=["solution"]
def update_scale(scaler, found_inf):
    """A new scaler: backed off (tracker 0) after an overflow, grown after growth_interval good steps in a row."""
    ### BEGIN SOLUTION
    new = dict(scaler)
    if found_inf:
        new["scale"] = float(np.float32(scaler["scale"] * scaler["backoff_factor"]))
        new["growth_tracker"] = 0
        return new
    successful = scaler["growth_tracker"] + 1
    if successful == scaler["growth_interval"]:
        with np.errstate(over="ignore"):  # past float32's largest value the product rounds to inf
            grown = np.float32(scaler["scale"] * scaler["growth_factor"])
        if np.isfinite(grown):
            new["scale"] = float(grown)
        new["growth_tracker"] = 0
    else:
        new["growth_tracker"] = successful
    return new
    ### END SOLUTION


# %% tags=["check"]
check("update_scale")
### BEGIN HIDDEN TESTS
check("update_scale", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. A step that skips

# %% tags=["solution"]
def scaler_step(params, grads, scaler, lr):
    """[params after one SGD step (unchanged if any gradient overflowed), the updated scaler, whether it skipped]."""
    ### BEGIN SOLUTION
    unscaled, found_inf = unscale_grads(grads, scaler["scale"])
    if found_inf:
        new_params = [np.array(p, dtype=np.float32) for p in params]
    else:
        new_params = [np.asarray(p, dtype=np.float32) - np.float32(lr) * g for p, g in zip(params, unscaled)]
    return [new_params, update_scale(scaler, found_inf), bool(found_inf)]
    ### END SOLUTION


# %% tags=["check"]
check("scaler_step")
### BEGIN HIDDEN TESTS
check("scaler_step", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. A real fp16 model that overflows
#
# `fp16_model.build()` is one linear layer whose float32 master weights are cast to fp16 for the forward and backward
# passes. Trained with your `scaler_step` from the scale 2^16 (growth interval 1, lr 2), its first steps overflow and
# are skipped while the scale backs off; then the scale grows as the gradients shrink. Trained without a scale, the
# same gradients flush to zero near the end and the loss stops falling.

# %% tags=["check"]
check("fp16_training")
### BEGIN HIDDEN TESTS
check("fp16_training", hidden=True)
### END HIDDEN TESTS

# %%
model = fp16_model.build(0)
scaled = fp16_model.train(model, 40, 2.0, new_scaler(growth_interval=1), scaler_step)
plain = fp16_model.train(model, 40, 2.0)
print("log2 scale:", [int(np.log2(s)) for s in scaled["scales"]])
print("skipped:   ", "".join("x" if s else "." for s in scaled["skipped"]))
print(f"final loss with the scaler {scaled['losses'][-1]:.2e}, without a scale {plain['losses'][-1]:.2e} "
      f"(its last gradient {plain['zero_grads'][-1]:.0%} zeros)")
