"""Checks: fake quantization's forward pass bit for bit, the straight-through gradient at the clamp's exact
boundary codes, errors on NaN and bad scales, LSQ's gradients, and a QAT fine-tune that recovers accuracy PTQ
loses.

Forward and backward are compared with `aisys.quant.qat` on the same input, and, where the conventions agree
(power-of-two scales, so that torch's x * (1 / scale) in float32 equals the float64 x / scale), with
`torch.fake_quantize_per_tensor_affine` and `torch.fake_quantize_per_channel_affine`. Visible and hidden cases
hold values that round to each end of the code range and to one past it, through exact halves (half to even), at
every bit width from 2 to 8, symmetric and asymmetric, per tensor and per row; hidden cases add random data and
scales. The QAT check runs the student's training on fixed datasets (deterministic, whatever the seed) and
rounds the result itself.
"""

import functools
import re

import numpy as np
import torch

from aisys.quant import affine, qat

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, exception_name, shown, unredacted

EXACT = (0.0, 0.0)  # forward and gradient are exact: the same float64 division, rounding and float32 product
QAT_MARGIN = 0.04  # accuracy QAT must gain over PTQ: the reference gains 0.091 and 0.111 on the two datasets
QAT_STEPS, QAT_LR = 100, 3e-3
FLOAT_STEPS, FLOAT_LR = 300, 1e-2
DATASETS = {False: [3], True: [6]}  # fixed seeds: the reference's margin over QAT_MARGIN is known on each


def _boundary_case(bits: int, symmetric: bool, scale: float, zero_point: int) -> dict:
    """x whose codes reach qmin - 1, qmin, qmax, qmax + 1 exactly, through halves and values just inside."""
    qmin, qmax = affine.int_range(bits, symmetric)
    low, high = qmin - zero_point, qmax - zero_point  # x / scale at the ends of the range
    ratios = [low - 1.6, low - 1.0, low - 0.5, low - 0.4, low, low + 0.5, low + 0.6, 0.0, 0.5, 1.5, -0.5, -1.5,
              high - 0.5, high, high + 0.4, high + 0.5, high + 0.6, high + 1.0, high + 3.5]
    x = (np.array(ratios) * scale).astype(np.float32)
    return {"x": x, "scale": np.float32(scale), "zero_point": np.int64(zero_point), "bits": bits,
            "symmetric": symmetric}


def _boundary_cases() -> list[dict]:
    cases = [_boundary_case(4, True, 1.0, 0), _boundary_case(4, False, 0.5, 3), _boundary_case(8, True, 0.25, 0),
             _boundary_case(8, False, 0.125, -128), _boundary_case(2, True, 2.0, 0), _boundary_case(3, False, 1.0, 3)]
    rows = np.stack([_boundary_case(4, True, 1.0, 0)["x"] * s for s in (1.0, 0.5, 4.0)])  # per row: (3, 1) params
    cases.append({"x": rows, "scale": np.array([[1.0], [0.5], [4.0]], np.float32),
                  "zero_point": np.zeros((3, 1), np.int64), "bits": 4, "symmetric": True})
    return cases


def _random_cases(rng) -> list[dict]:
    cases = []
    for bits in range(2, 9):
        symmetric = bool(rng.integers(0, 2))
        qmin, qmax = affine.int_range(bits, symmetric)
        x = (rng.standard_normal((5, 24)) * rng.uniform(0.5, 4.0)).astype(np.float32)
        scale = (np.abs(x).max(axis=1, keepdims=True) / qmax * rng.uniform(0.4, 1.2, (5, 1))).astype(np.float32)
        zero_point = np.zeros((5, 1), np.int64) if symmetric else rng.integers(qmin, qmax + 1, (5, 1))
        cases.append({"x": x, "scale": scale, "zero_point": zero_point, "bits": bits, "symmetric": symmetric})
    return cases


def _torch_forward(x, scale, zero_point, bits, symmetric):
    """torch's own fake quantization: per tensor for scalar parameters, per channel (axis 0) for (rows, 1)."""
    out, _ = _torch_both(x, scale, zero_point, bits, symmetric, None)
    return out


def _torch_backward(x, scale, zero_point, bits, symmetric, grad_output):
    return _torch_both(x, scale, zero_point, bits, symmetric, grad_output)[1]


def _torch_both(x, scale, zero_point, bits, symmetric, grad_output):
    qmin, qmax = affine.int_range(bits, symmetric)
    t = torch.tensor(np.asarray(x, np.float32), requires_grad=True)
    scale, zero_point = np.asarray(scale), np.asarray(zero_point)
    if scale.ndim == 0:
        out = torch.fake_quantize_per_tensor_affine(t, float(scale), int(zero_point), qmin, qmax)
    else:
        out = torch.fake_quantize_per_channel_affine(t, torch.tensor(scale.reshape(-1)),
                                                      torch.tensor(zero_point.reshape(-1), dtype=torch.int32),
                                                      0, qmin, qmax)
    if grad_output is not None:
        out.backward(torch.tensor(np.asarray(grad_output, np.float32)))
    return out.detach().numpy(), (t.grad.numpy() if grad_output is not None else None)


def _with_grad(cases, rng) -> list[dict]:
    """Each case with a gradient to pass back: values other than 1, so that passing it on is checked too."""
    return [{**case, "grad_output": rng.uniform(0.5, 2.0, np.shape(case["x"])).astype(np.float32)} for case in cases]


def _hint(case, got, expected) -> str:
    return ("the codes are round(x / scale) + zero_point (x / scale in float64, half to even), clamped to "
            "[qmin, qmax], then (code - zero_point) * scale in float32")


def _grad_hint(case, got, expected) -> str:
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape == expected.shape:
        if not np.any(got):
            return ("every gradient is 0: round's true derivative is 0, which is why the straight-through estimator "
                    "passes the gradient through it as if it were the identity")
        if np.all(got == np.asarray(case["grad_output"])):
            return ("the gradient passes everywhere: the clamp must stop it where the rounded code falls outside "
                    "[qmin, qmax]")
    return ("the gradient passes (times grad_output) exactly where qmin <= round(x / scale) + zero_point <= qmax, "
            "both ends included, the code rounded first")


@check(points=3)
def forward(student, rng, hidden):
    """fake_quantize bit for bit: the codes at and past both ends of the range, halves rounded to even, per tensor
    and per row, every bit width; also equal to torch.fake_quantize_per_tensor_affine / per_channel_affine."""
    cases = _boundary_cases()[:2] if not hidden else _boundary_cases() + _random_cases(rng)
    compare_cases(student, "fake_quantize_arrays", cases, qat.fake_quantize_arrays, returns="array", hidden=hidden,
                  tolerance=EXACT, dtype="float32", hint=_hint)
    compare_cases(student, "fake_quantize_arrays", _boundary_cases()[:3] if not hidden else _boundary_cases(),
                  _torch_forward, returns="array", hidden=hidden, tolerance=EXACT, dtype="float32", hint=_hint)


@check(points=3)
def gradient(student, rng, hidden):
    """The straight-through gradient: grad_output where the rounded code is in [qmin, qmax] (both ends), 0 where
    the clamp bites, at exactly the boundary codes; the same as torch's fake quantization's backward."""
    base = _boundary_cases()[:2] if not hidden else _boundary_cases() + _random_cases(rng)
    cases = _with_grad(base, np.random.default_rng(0) if not hidden else rng)
    compare_cases(student, "fake_quantize_backward", cases, qat.fake_quantize_backward, returns="array",
                  hidden=hidden, tolerance=EXACT, dtype="float32", hint=_grad_hint)
    compare_cases(student, "fake_quantize_backward", cases[:len(_boundary_cases())], _torch_backward,
                  returns="array", hidden=hidden, tolerance=EXACT, dtype="float32", hint=_grad_hint)


def _raises_value_error(student, naming: str, why: str, **case):
    """fake_quantize must raise ValueError with `naming` as a word of its message (judged here, never quoted)."""
    call = f"fake_quantize({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"
    got = student.call("fake_quantize_error", returns="any", **case)
    if got is None:
        raise CheckFailure(f"{call} returned a result; it should raise ValueError naming {naming}: {why}")
    if not (isinstance(got, list) and len(got) == 2 and all(isinstance(g, str) for g in got)):
        raise CheckFailure(f"fake_quantize_error returned {describe(got)}: leave the given helper as it is")
    if got[0] != "ValueError":
        raise CheckFailure(f"{call} raised {exception_name(got[0])}; it should raise ValueError naming {naming}: {why}")
    if not re.search(rf"\b{naming}\b", got[1]):
        raise CheckFailure(f"{call} raised ValueError, but its message does not name the argument `{naming}`"
                           + unredacted(f" (it says {got[1]!r})") + f": {why}")


@check(points=1)
def errors(student, rng, hidden):
    """NaN or an infinity in x raises ValueError naming x (a NaN would round to an undefined code); a scale that is
    not > 0 raises ValueError naming scale."""
    x = np.array([0.5, np.nan, 1.0], np.float32) if not hidden else rng.standard_normal(6).astype(np.float32)
    if hidden:
        x[int(rng.integers(0, 6))] = [np.nan, np.inf, -np.inf][int(rng.integers(0, 3))]
    params = {"zero_point": np.int64(0), "bits": 4, "symmetric": True}
    _raises_value_error(student, "x", "it holds a value that is not finite", x=x, scale=np.float32(0.1), **params)
    for bad in ([0.0] if not hidden else [0.0, -0.5]):
        _raises_value_error(student, "scale", "a scale must be > 0", x=np.ones(3, np.float32),
                            scale=np.float32(bad), **params)


LSQ_STEP_TOLERANCE = (1e-5, 1e-7)  # dL/ds is a float32 sum of N terms: its order, free, moves the last bits


def _lsq_case(bits: int, step: float, rng) -> dict:
    """v / step at every branch of eq. 3: below -Q_N, exactly -Q_N and Q_P (the clamped branches), just inside,
    halves (rounded to even), and far outside."""
    qp = 2 ** (bits - 1) - 1
    ratios = [-qp - 5, -qp - 0.5, -qp, -qp + 0.25, -1.5, -0.5, 0.0, 0.5, 0.75, 2.5, qp - 0.5, qp - 0.1, qp, qp + 0.2,
              qp + 9]
    v = (np.array(ratios) * step).astype(np.float32)
    return {"v": v, "step": float(np.float32(step)), "bits": bits,
            "grad_output": rng.uniform(0.5, 2.0, v.shape).astype(np.float32)}


def _lsq_compare(got, expected, case):
    if not (isinstance(got, list) and len(got) == 3):
        raise CheckFailure(f"lsq_arrays returned {describe(got)}; expected [v_hat, dL/dv, dL/ds]")
    what = ("v_hat", "dL/dv", "dL/ds")
    for i, (g, e) in enumerate(zip(got, expected)):
        rtol, atol = LSQ_STEP_TOLERANCE if i == 2 else EXACT
        try:
            assert_format(g, "float32", where=what[i])
            assert_close(g, e, rtol=rtol, atol=atol, where=what[i])
        except CheckFailure as failure:
            hint = {0: "v_hat = round(clamp(v / s, -Q_N, Q_P)) * s",
                    1: "dL/dv passes where -Q_N < v/s < Q_P, strictly, and is 0 elsewhere",
                    2: "dL/ds = g * sum(dL/dv_hat * d): d = round(r) - r inside, -Q_N at or below -Q_N, Q_P at or "
                       "above Q_P, and g = 1 / sqrt(N * Q_P)"}[i]
            raise CheckFailure(f"{failure}: {hint}") from None


@check(points=2)
def lsq(student, rng, hidden):
    """LSQ's quantizer and its gradients (Esser et al. 2020, eq. 3 with g = 1 / sqrt(N Q_P)): every branch, the
    exact boundaries -Q_N and Q_P, halves; hidden: every bit width and random data."""
    fixed = np.random.default_rng(0)
    cases = [_lsq_case(4, 1.0, fixed), _lsq_case(4, 0.5, fixed)]
    if hidden:
        cases = [_lsq_case(bits, 2.0 ** -int(rng.integers(0, 4)), rng) for bits in range(2, 9)]
        for _ in range(3):
            v = (rng.standard_normal(int(rng.integers(1, 40))) * rng.uniform(0.2, 3)).astype(np.float32)
            cases.append({"v": v, "step": float(np.float32(rng.uniform(0.05, 0.6))), "bits": int(rng.integers(2, 9)),
                          "grad_output": rng.standard_normal(v.shape).astype(np.float32)})
    compare_cases(student, "lsq_arrays", cases, qat.lsq_arrays, returns="list", hidden=hidden, compare=_lsq_compare)


@functools.cache
def _experiment(seed: int):
    """(dataset, float weights, PTQ accuracy): the float model trained by the reference, rounded to 4 bits."""
    data = qat.mlp_dataset(seed)
    weights = qat.mlp_train(qat.mlp_init(seed), data["x_train"], data["y_train"], steps=FLOAT_STEPS, lr=FLOAT_LR)
    return data, weights, qat.mlp_accuracy(weights, data["x_test"], data["y_test"], bits=4)


@check(points=3)
def qat_recovers(student, rng, hidden):
    """train_qat's weights, rounded to 4 bits per tensor, beat the rounded float weights (PTQ) by QAT_MARGIN in
    test accuracy: the weights train through the rounding."""
    for seed in DATASETS[hidden]:
        data, weights, ptq = _experiment(seed)
        got = student.call("train_qat", weights=weights, x=data["x_train"], y=data["y_train"], steps=QAT_STEPS,
                           lr=QAT_LR, bits=4, returns="list")
        where = f"train_qat on {'a hidden' if hidden else 'the visible'} dataset"
        if len(got) != len(weights) or any(np.shape(g) != w.shape for g, w in zip(got, weights)):
            raise CheckFailure(f"{where} returned {describe(got)}; expected {len(weights)} weight arrays of shapes "
                               f"{[w.shape for w in weights]}")
        if not all(np.isfinite(np.asarray(g, np.float64)).all() for g in got):
            raise CheckFailure(f"{where} returned weights that are not all finite (NaN or inf)")
        if all(np.array_equal(g, w) for g, w in zip(got, weights)):
            raise CheckFailure(f"{where} returned the weights unchanged: no gradient reached them (a zero gradient "
                               "through round, or a detach between the weights and the loss)")
        accuracy = qat.mlp_accuracy([np.asarray(g, np.float32) for g in got], data["x_test"], data["y_test"], bits=4)
        if accuracy < ptq + QAT_MARGIN:
            raise CheckFailure(f"{where}: rounded to 4 bits, your weights reach a test accuracy of "
                               f"{shown(accuracy, '.3f')}, and the float weights rounded (PTQ) {shown(ptq, '.3f')}; "
                               f"QAT must gain at least {QAT_MARGIN}. Check that every weight goes through "
                               "fake_quantize_weight in the forward pass and that its gradient reaches the weights")
