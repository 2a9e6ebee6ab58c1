"""Checks: a dynamic loss scaler, against torch's own (torch._amp_update_scale_) and aisys.parallel.loss_scaling.

unscale_grads: fp16 and float32 gradients at scales 2^16, 2^24 and one not a power of two; +inf, -inf and a
gradient whose only non-finite element is NaN (which `x > max` and isinf miss), in the last of several gradients;
the result float32 and the unscale done in float32 (gradients that land below fp16's normal range once unscaled).
update_scale: every step of sequences of found-inf flags, each compared with torch._amp_update_scale_ on CPU tensors
(the reference agrees): back-off, growth on the n-th good step (intervals 1, 2, 3 and random), the tracker reset by
an overflow just before a growth, factors that are not powers of two (the scale rounded to float32 after every
product), and the growth that would pass float32's largest value. scaler_step: a good step (SGD in float32), a
skipped one (+inf; NaN only) with the params unchanged, the scale backed off and the tracker reset, a growth.
fp16_training: the fp16 model of aisys.parallel.fp16_model trained with the student's scaler_step, called by the
grader step by step: the scales, the skipped steps and the final weights equal to the reference scaler's, and the
loss lower than training the same model without a loss scale.
"""

import numpy as np
import torch

from aisys.parallel import fp16_model
from aisys.parallel import loss_scaling as ls
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown, unredacted

EXACT = (0.0, 0.0)  # the scale, the tracker and a skipped step's params are fixed bit for bit by the rules
# float32(g) * float32(1/scale) against g / scale rounded once: inv_scale's rounding and the product's are each at
# most half an ulp, so two float32 ulps (2^-22) admit either way of unscaling; fp16's 2^-11 is far outside.
UNSCALE = (2.0 ** -22, 0.0)
# p - float32(lr) * unscaled in float32: the same two roundings and one more for the subtraction, relative to |p|.
SGD = (2.0 ** -21, 0.0)


def _scaler(scale, tracker=0, growth=2.0, backoff=0.5, interval=3) -> dict:
    return {"scale": float(np.float32(scale)), "growth_tracker": int(tracker), "growth_factor": float(growth),
            "backoff_factor": float(backoff), "growth_interval": int(interval)}


def torch_update(scaler, found_inf) -> dict:
    """The scaler after torch._amp_update_scale_, GradScaler.update's kernel, on CPU tensors."""
    scale = torch.full((), scaler["scale"], dtype=torch.float32)
    tracker = torch.full((), scaler["growth_tracker"], dtype=torch.int32)
    torch._amp_update_scale_(scale, tracker, torch.full((), float(found_inf), dtype=torch.float32),
                             scaler["growth_factor"], scaler["backoff_factor"], scaler["growth_interval"])
    new = dict(scaler, scale=float(scale.item()), growth_tracker=int(tracker.item()))
    if ls.update_scale(scaler, found_inf) != new:  # the reference is torch's rule, or this check is wrong
        raise AssertionError(f"aisys.parallel.loss_scaling.update_scale differs from torch on {scaler}, {found_inf}")
    return new


def _compare_scaler(got, expected, where="scaler"):
    if not isinstance(got, dict):
        raise CheckFailure(f"{where}: expected a dict with keys {', '.join(ls.SCALER_KEYS)}, got {describe(got)}")
    assert_close(got, expected, rtol=0, atol=0, where=where)
    if not isinstance(got["growth_tracker"], int):
        raise CheckFailure(f"{where}['growth_tracker'] must be an integer, got {describe(got['growth_tracker'])}")


def _update_cases(flags, scaler) -> list[dict]:
    """One case per flag, each from the scaler torch's rule reaches after the flags before it."""
    cases = []
    for flag in flags:
        cases.append({"scaler": scaler, "found_inf": bool(flag)})
        scaler = torch_update(scaler, bool(flag))
    return cases


def _named_update(case) -> str:
    s = case["scaler"]
    return unredacted(f"update_scale(scale={s['scale']!r}, growth_tracker={s['growth_tracker']}, "
                      f"growth_factor={s['growth_factor']!r}, backoff_factor={s['backoff_factor']!r}, "
                      f"growth_interval={s['growth_interval']}, found_inf={case['found_inf']})",
                      "update_scale(scaler, found_inf)")


def _update_hint(case, got, expected) -> str:
    if not isinstance(got, dict) or not isinstance(got.get("scale"), float):
        return ""
    s, flag = case["scaler"], case["found_inf"]
    if flag and got.get("growth_tracker") != 0:
        return "an overflow resets the growth tracker: the next growth needs growth_interval good steps again"
    if not flag and s["growth_tracker"] + 1 < s["growth_interval"] and got["scale"] != s["scale"]:
        return "the scale grows only when the tracker, counting this good step, reaches growth_interval"
    if not flag and s["growth_tracker"] + 1 == s["growth_interval"] and got["scale"] == s["scale"]:
        return ("with growth_interval = n the scale grows on the n-th good step in a row (the tracker counts this "
                "step, then is compared), unless the product is inf in float32")
    if got["scale"] != float(np.float32(got["scale"])) or not np.isfinite(np.float32(got["scale"])):
        return ("the scale is a float32 value: round every product to float32 (an inf in float32 leaves the scale "
                "as it was)")
    return ""


@check(points=3)
def update_scale(student, rng, hidden):
    """update_scale(scaler, found_inf): back-off and tracker reset on an overflow, growth on the growth_interval-th
    good step, the scale a float32, as torch._amp_update_scale_ gives it."""
    T, F = True, False
    # interval 3: two overflows, a growth on the 3rd good step, an overflow with the tracker at 2 (just before a
    # growth: it must reset), then 3 good steps to the next growth
    reset = _update_cases([T, T, F, F, F, F, F, T, F, F, T, F, F, F, F], _scaler(2.0 ** 16, interval=3))
    every = _update_cases([F, F, T, F, F, F], _scaler(2.0 ** 10, interval=1))  # interval 1: every good step grows
    cases = reset + every
    if hidden:
        odd = _update_cases([F, F, F, F, T, F, F, F, F, F, F, T, T, F, F, F],  # products not powers of two
                            _scaler(1000.0, growth=1.1, backoff=0.3, interval=2))
        top = _update_cases([F, F, T, F, F, F], _scaler(2.0 ** 127, interval=1))  # 2^128 is inf in float32: stays
        interval = int(rng.integers(2, 6))
        drawn = _update_cases(list(rng.random(24) < 0.25),
                              _scaler(float(2.0 ** rng.integers(8, 20)), growth=float(rng.choice([2.0, 1.5, 4.0])),
                                      backoff=float(rng.choice([0.5, 0.25, 0.7])), interval=interval))
        cases = every + reset + odd + top + drawn
    compare_cases(student, "update_scale", cases, torch_update, returns="mapping", hidden=hidden,
                  compare=lambda got, expected, case: _compare_scaler(got, expected), call=_named_update,
                  hint=_update_hint)


def _grads_case(rng, scale, inject=None, where=-1):
    """Scaled gradients: an fp16 array and a float32 one (and a third fp16), magnitudes from tiny to large, whose
    unscaled values fall below fp16's normal range; `inject` put into the gradient at `where`."""
    scale = float(np.float32(scale))
    tiny = rng.uniform(0.5, 40.0, size=(3, 4)) * rng.choice([-1, 1], size=(3, 4))  # unscaled: below 2^-14 at 2^16
    large = rng.standard_normal(6) * 3000.0
    grads = [tiny.astype(np.float16), large.astype(np.float32), (rng.standard_normal((2, 2)) * 50).astype(np.float16)]
    if inject is not None:
        grads[where] = grads[where].copy()
        grads[where].flat[1] = inject
    return {"grads": grads, "scale": scale}


def _compare_unscale(got, expected, case):
    if not (isinstance(got, list) and len(got) == 2):
        raise CheckFailure(f"expected [unscaled gradients, found_inf], got {describe(got)}")
    unscaled, found = got
    if not isinstance(found, bool):
        raise CheckFailure(f"found_inf must be a bool, got {describe(found)}")
    if found != expected[1]:
        what = ("one gradient holds +inf, -inf or NaN (np.isinf misses NaN, and so does any comparison such as "
                "x > max: every comparison with NaN is False)" if expected[1] else "every gradient is finite")
        raise CheckFailure(f"found_inf is {found}, but {what}")
    if not (isinstance(unscaled, list) and len(unscaled) == len(expected[0])):
        raise CheckFailure(f"expected a list of {len(expected[0])} unscaled gradients, got {describe(unscaled)}")
    for i, (g, e) in enumerate(zip(unscaled, expected[0])):
        assert_format(g, "float32", where=f"unscaled[{i}]")
        assert_close(g, e, rtol=UNSCALE[0], atol=UNSCALE[1], where=f"unscaled[{i}]")


def _unscale_hint(case, got, expected) -> str:
    return ("unscale in float32: cast the gradient to float32, then multiply by np.float32(1 / scale); in fp16 the "
            "unscaled gradients fall into the subnormals (or 1/scale itself does) and lose their digits")


@check(points=2)
def unscale_grads(student, rng, hidden):
    """unscale_grads(grads, scale): float32 gradients times float32(1/scale), and found_inf for +inf, -inf or NaN
    anywhere."""
    fixed = np.random.default_rng(21)
    cases = [_grads_case(fixed, 2.0 ** 16), _grads_case(fixed, 2.0 ** 16, np.inf),
             _grads_case(fixed, 2.0 ** 14, np.nan)]  # NaN and nothing else non-finite: it must be found too
    if hidden:
        cases = [_grads_case(fixed, 2.0 ** 16, np.nan, where=0), _grads_case(fixed, 2.0 ** 24),
                 _grads_case(fixed, 2.0 ** 15, -np.inf, where=0), _grads_case(fixed, 2.0 ** 16, np.nan),
                 _grads_case(fixed, 3 * 2.0 ** 12),  # 1/scale not a power of two
                 _grads_case(fixed, 2.0 ** 16, np.inf, where=1),
                 _grads_case(rng, float(2.0 ** rng.integers(12, 20)),
                             [None, np.nan, np.inf, -np.inf][int(rng.integers(4))], where=int(rng.integers(3)))]
    compare_cases(student, "unscale_grads", cases, ls.unscale, returns="list", hidden=hidden,
                  compare=_compare_unscale, hint=_unscale_hint)


def _step_case(rng, scaler, inject=None, lr=0.25):
    case = _grads_case(rng, scaler["scale"], inject)
    params = [rng.standard_normal(np.shape(g)).astype(np.float32) for g in case["grads"]]
    return {"params": params, "grads": case["grads"], "scaler": scaler, "lr": lr}


def _compare_step(got, expected, case):
    if not (isinstance(got, list) and len(got) == 3):
        raise CheckFailure(f"expected [params, scaler, skipped], got {describe(got)}")
    params, scaler, skipped = got
    if not isinstance(skipped, bool):
        raise CheckFailure(f"skipped must be a bool, got {describe(skipped)}")
    if skipped != expected[2]:
        raise CheckFailure(f"skipped is {skipped}, but " + (
            "a gradient holds inf or NaN: the step must be skipped" if expected[2] else "every gradient is finite"))
    if not (isinstance(params, list) and len(params) == len(expected[0])):
        raise CheckFailure(f"expected a list of {len(expected[0])} params, got {describe(params)}")
    for i, (p, e) in enumerate(zip(params, expected[0])):
        assert_format(p, "float32", where=f"params[{i}]")
        try:
            if expected[2]:
                assert_close(p, e, rtol=EXACT[0], atol=EXACT[1], where=f"params[{i}]")
            else:
                assert_close(p, e, rtol=SGD[0], atol=SGD[1], where=f"params[{i}]")
        except CheckFailure as failure:
            raise CheckFailure(f"{failure}: " + ("a skipped step leaves every param exactly as it was (neither the "
                                                 "non-finite gradient nor a zeroed one may touch it)" if expected[2]
                                                 else "a good step is p - float32(lr) * unscaled gradient")) from None
    _compare_scaler(scaler, expected[1])


@check(points=2)
def scaler_step(student, rng, hidden):
    """scaler_step(params, grads, scaler, lr): SGD with the unscaled gradients, or, when any is inf or NaN, no step
    (params unchanged) and the scale backed off; the scaler updated either way."""
    fixed = np.random.default_rng(5)
    cases = [_step_case(fixed, _scaler(2.0 ** 10, tracker=1)), _step_case(fixed, _scaler(2.0 ** 16, tracker=2), np.inf)]
    if hidden:
        cases = [_step_case(fixed, _scaler(2.0 ** 16, tracker=1), np.nan),  # NaN only: skipped all the same
                 _step_case(fixed, _scaler(2.0 ** 12, tracker=2)),  # the 3rd good step: grows
                 _step_case(fixed, _scaler(2.0 ** 16, tracker=2), -np.inf),
                 _step_case(fixed, _scaler(2.0 ** 12, tracker=0)),
                 _step_case(rng, _scaler(float(2.0 ** rng.integers(10, 18)), tracker=int(rng.integers(3))),
                            [None, np.nan, np.inf][int(rng.integers(3))], lr=float(rng.uniform(0.1, 1.0)))]
    compare_cases(student, "scaler_step", cases, ls.step, returns="list", hidden=hidden, compare=_compare_step)


def _student_step(student):
    def step(params, grads, scaler, lr):
        got = student.call("scaler_step", params, grads, scaler, lr, returns="list")
        if not (isinstance(got, list) and len(got) == 3 and isinstance(got[0], list) and len(got[0]) == 1):
            raise CheckFailure(f"scaler_step returned {describe(got)}; expected [params, scaler, skipped]")
        if not (isinstance(got[1], dict) and set(got[1]) == set(ls.SCALER_KEYS)):
            raise CheckFailure(f"scaler_step returned the scaler {describe(got[1])}; expected a dict with keys "
                               f"{', '.join(ls.SCALER_KEYS)}")
        w = got[0][0]
        if not (isinstance(w, np.ndarray) and w.dtype == np.float32 and w.shape == np.shape(params[0])):
            raise CheckFailure(f"scaler_step returned params[0] as {describe(w)}; expected float32 of shape "
                               f"{np.shape(params[0])}")
        return got[0], got[1], got[2]
    return step


# (model seed, growth interval, steps): interval 1 saws at the end, where the gradients stop shrinking; interval 2
# grows every other step, which an interval off by one or ignored changes
RUNS = [(0, 1, 40)]
HIDDEN_RUNS = [(1, 2, 36), (0, 1, 40)]
LR = 2.0  # halves the error each step (fp16_model's x has orthogonal columns)
# the final weights: each step's float32 SGD may differ from the reference's in its last bit (SGD above), and the
# model halves any such difference every step, so they stay within a few float32 ulps of |w| (a few 1e-7 relative)
WEIGHTS = (1e-5, 1e-9)


@check(points=3)
def fp16_training(student, rng, hidden):
    """The fp16 model that overflows at 2^16 and underflows without a scale, trained with scaler_step (called by the
    grader each step): the scales and skipped steps equal to the reference scaler's, the same final weights, and a
    lower loss than without loss scaling."""
    for seed, interval, steps in HIDDEN_RUNS if hidden else RUNS:
        model = fp16_model.build(seed)
        run = f"the fp16 model (seed {seed}) trained {steps} steps from scale 2^16 with growth_interval {interval}"
        expected = fp16_model.train(model, steps, LR, ls.new_scaler(growth_interval=interval), ls.step)
        try:
            got = fp16_model.train(model, steps, LR, ls.new_scaler(growth_interval=interval), _student_step(student))
        except CheckFailure as failure:
            raise CheckFailure(f"{run}: {failure}") from None
        for i, (g, e, gs, es) in enumerate(zip(got["scales"], expected["scales"], got["skipped"],
                                               expected["skipped"])):
            if g != e or gs != es:
                seen = "".join("x" if s else "." for s in got["skipped"][:i + 1])
                want = "".join("x" if s else "." for s in expected["skipped"][:i + 1])
                raise CheckFailure(
                    f"{run}: step {i} used the scale {shown(g)} and was {'skipped' if gs else 'taken'}; the reference "
                    f"scaler used {shown(e)} and {'skipped' if es else 'took'} it (skipped so far, x: {shown(seen)}; "
                    f"the reference's {shown(want)}). An overflow backs the scale off and skips the step; the scale "
                    f"grows after growth_interval good steps in a row")
        try:
            assert_close(got["w"], expected["w"], rtol=WEIGHTS[0], atol=WEIGHTS[1], where="the final weights")
        except CheckFailure as failure:
            raise CheckFailure(f"{run}: {failure}; the scales and skips agree, so a step's update differs (a "
                               "skipped step changes nothing; a good one is p - lr * the gradient unscaled in "
                               "float32)") from None
        unscaled = fp16_model.train(model, steps, LR)
        if not got["losses"][-1] < unscaled["losses"][-1]:
            raise CheckFailure(f"{run}: the final loss, {shown(got['losses'][-1], '.3g')}, is not below "
                               f"{shown(unscaled['losses'][-1], '.3g')}, the loss without loss scaling (whose last "
                               "gradients are all zero in fp16)")
