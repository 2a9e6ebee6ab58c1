"""Checks: SmoothQuant's scales, folded into a norm and the layers after it, and what they do to a W8A8 layer.

scales: smoothing_scales against the reference on one layer, alpha away from 0.5 (where a swapped exponent
shows), weights that are not square (a maximum over the wrong axis has the wrong length). alpha_edges: alpha = 0
(every weight column's max becomes 1) and alpha = 1 (every activation channel's max becomes 1), as values and as
those properties. shared_input: q, k and v of different widths reading one X, each holding the largest weight of
some channels: the maximum is over all three. zero_channel: a channel with no activation, a column with no weight,
and both: the clamps keep every scale finite and > 0. equivalent: smooth against the reference, and the smoothed
norm + layers computing the original's outputs in float64 (LayerNorm with a bias, RMSNorm without). w8a8_error:
the student's scales and smoothing, then the W8A8 layer (reference), on layers whose norm gain has outlier
channels: the error must fall below the unsmoothed layer's.

Hidden cases draw sizes, alphas, outlier channels and magnitudes from the seed.
"""

import numpy as np

from aisys.quant import smoothquant
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown

VALUES = (1e-9, 0.0)  # float64 arithmetic in another order differs by a few ulps; any mistake by far more
OUTPUTS = 1e-9  # relative to the outputs' largest magnitude: float64 rounding of gain / s and W * s, summed over C


def _layer(rng, tokens, channels, outs, outliers=(), magnitude=50.0, bias=True):
    """A norm (gain with outlier channels) feeding layers of widths `outs`; X the norm's output."""
    gain = 1.0 + 0.2 * rng.standard_normal(channels)
    gain[list(outliers)] = magnitude * rng.choice([-1.0, 1.0], len(outliers)) * rng.uniform(0.6, 1.0, len(outliers))
    x_in = rng.standard_normal((tokens, channels))
    layer = {"x_in": x_in, "gain": gain, "bias": 0.1 * rng.standard_normal(channels) if bias else None,
             "weights": [rng.standard_normal((out, channels)) * rng.uniform(0.02, 0.2) for out in outs]}
    layer["X"] = smoothquant.norm(x_in, gain, layer["bias"])
    return layer


def _scales_case(layer, alpha):
    return {"act_max": smoothquant.act_max(layer["X"]), "weights": layer["weights"], "alpha": alpha}


def _compare_scales(student, cases, hidden, hint=None):
    compare_cases(student, "smoothing_scales", cases, smoothquant.smoothing_scales, returns="array", hidden=hidden,
                  tolerance=VALUES, dtype="float64", hint=hint)


@check(points=2)
def scales(student, rng, hidden):
    """smoothing_scales(act_max, [W], alpha): act_max ** alpha / weight_max ** (1 - alpha), the weight's max over
    its output rows, per input channel."""
    fixed = np.random.default_rng(20)
    cases = [_scales_case(_layer(fixed, 16, 8, [12], outliers=[2]), 0.5),
             _scales_case(_layer(fixed, 16, 12, [5], outliers=[0, 7]), 0.8)]
    if hidden:
        cases = [_scales_case(_layer(rng, int(rng.integers(2, 40)), int(rng.integers(2, 40)),
                                     [int(rng.integers(1, 40))], outliers=[0], magnitude=float(rng.uniform(5, 100))),
                              float(alpha)) for alpha in (0.25, 0.6, 0.75, rng.uniform(0.05, 0.95))]
        cases.append(_scales_case(_layer(rng, 1, 1, [1]), 0.3))  # one token, one channel, one output

    def hint(case, got, expected):
        swapped = np.maximum(case["act_max"] ** (1 - case["alpha"]) /
                                         smoothquant.weight_max(case["weights"]) ** case["alpha"], 1e-5)
        if np.shape(got) == np.shape(expected) and np.allclose(got, swapped, rtol=1e-9):
            return "These are act_max ** (1 - alpha) / weight_max ** alpha: alpha is the activation's exponent"
        if np.shape(got) != np.shape(expected):
            return "One scale per input channel (C of them): the weight's max is over its rows (axis 0), per column"
        return ""
    _compare_scales(student, cases, hidden, hint)


@check(points=1)
def alpha_edges(student, rng, hidden):
    """alpha = 1 gives s = act_max (every channel of X / s peaks at 1); alpha = 0 gives s = 1 / weight_max (every
    column of W * s peaks at 1)."""
    fixed = np.random.default_rng(21)
    layers = [_layer(fixed, 16, 8, [10], outliers=[5])]
    if hidden:
        layers = [_layer(rng, int(rng.integers(2, 30)), int(rng.integers(2, 30)), [int(rng.integers(1, 30))],
                      outliers=[0]) for _ in range(2)]
    for layer in layers:
        for alpha, carried, peaks in ((1.0, "the weights", "act_max / s"), (0.0, "the activations",
                                                                             "weight_max * s")):
            case = _scales_case(layer, alpha)
            _compare_scales(student, [case], hidden)
            got = student.call("smoothing_scales", returns="array", **case)
            peak = case["act_max"] / got if alpha == 1 else smoothquant.weight_max(case["weights"]) * got
            if not np.allclose(peak, 1.0, rtol=1e-9):
                raise CheckFailure(f"with alpha = {shown(alpha)}, {peaks} should be 1 in every channel ({carried} "
                                   f"take all the range), and it is not")


@check(points=1)
def shared_input(student, rng, hidden):
    """q, k and v read one X: the weight maximum of channel j is over all three layers' column j."""
    def qkv(generator, channels, outs, alpha):
        layer = _layer(generator, 16, channels, outs, outliers=[1])
        for i, w in enumerate(layer["weights"]):  # each layer holds the largest weight of a third of the channels
            w[:, i::3] *= 4.0
        return _scales_case(layer, alpha)
    cases = [qkv(np.random.default_rng(22), 9, [6, 3, 3], 0.5)]  # q wider than k and v, as with grouped queries
    if hidden:
        cases = [qkv(rng, int(rng.integers(3, 40)), [int(rng.integers(1, 30)) for _ in range(3)],
                     float(rng.uniform(0.3, 0.7))) for _ in range(3)]

    def hint(case, got, expected):
        for i, w in enumerate(case["weights"]):
            alone = smoothquant.smoothing_scales(case["act_max"], [w], case["alpha"])
            if np.shape(got) == alone.shape and np.allclose(got, alone, rtol=1e-9):
                return f"These are the scales of weights[{shown(i)}] alone: every layer reading X shares s"
        return ""
    _compare_scales(student, cases, hidden, hint)


@check(points=1)
def zero_channel(student, rng, hidden):
    """A channel with no activation, a weight column of zeros, and both: the clamps (>= 1e-5) keep s finite > 0."""
    channels = 6 if not hidden else int(rng.integers(4, 20))
    generator = np.random.default_rng(23) if not hidden else rng
    layer = _layer(generator, 8, channels, [5], outliers=[0])  # one layer: sharing is shared_input's
    act = smoothquant.act_max(layer["X"])
    act[1] = 0.0  # a dead activation channel: s = 0 ** alpha = 0 before the clamp
    for w in layer["weights"]:
        w[:, 2] = 0.0  # no weight reads channel 2: weight_max 0 before the clamp
        w[:, 3] = 0.0
    act[3] = 0.0  # both
    cases = [{"act_max": act, "weights": layer["weights"], "alpha": alpha} for alpha in (0.5, 0.0, 1.0)]
    for case in cases:
        got = student.call("smoothing_scales", returns="array", **case)
        if np.shape(got) == (channels,) and not (np.isfinite(got) & (got > 0)).all():
            raise CheckFailure(f"with alpha = {shown(case['alpha'])}, a channel with act_max 0 or a weight column "
                               "of zeros gave a scale that is 0, inf or NaN: clamp weight_max and s to >= 1e-5 "
                               "(gain / s and W * s must stay finite)")
    _compare_scales(student, cases, hidden)


def _smooth_reference(gain, bias, weights, scales):
    return tuple(smoothquant.smooth(gain, bias, weights, scales)[:3])


def _equivalent(student, cases, hidden):
    def compare(got, expected, case):
        if not isinstance(got, list) or len(got) != 3 or not isinstance(got[2], list) \
                or len(got[2]) != len(case["weights"]):
            raise CheckFailure(f"smooth must return (gain, bias, [one weight per layer]), got {describe(got)}")
        gain, bias, weights = got
        for where, value, want in (("gain", gain, expected[0]), *((f"weights[{i}]", w, e) for i, (w, e) in
                                                                   enumerate(zip(weights, expected[2])))):
            assert_format(value, "float64", where=where)
            assert_close(value, want, rtol=VALUES[0], atol=VALUES[1], where=where)
        if case["bias"] is None and bias is not None:
            raise CheckFailure("RMSNorm has no bias (bias is None): the bias entry must stay None")
        if case["bias"] is not None:
            assert_format(bias, "float64", where="bias")
            assert_close(bias, expected[1], rtol=VALUES[0], atol=VALUES[1], where="bias")
        for i, (w, new_w) in enumerate(zip(case["weights"], weights)):
            before = smoothquant.norm(case["x_in"], case["gain"], case["bias"]) @ w.T
            after = smoothquant.norm(case["x_in"], gain, bias) @ np.asarray(new_w).T
            assert_close(after, before, rtol=OUTPUTS, atol=OUTPUTS * np.abs(before).max(),
                         where=f"layer {i}'s output after smoothing (it must equal the output before)")
    compare_cases(student, "smooth", [{k: c[k] for k in ("gain", "bias", "weights", "scales")} for c in cases],
                  _smooth_reference, returns="list", hidden=hidden,
                  compare=lambda got, expected, case: compare(got, expected, next(
                      c for c in cases if c["gain"] is case["gain"])),
                  call=lambda case: "smooth(gain, bias, weights, scales)")


@check(points=2)
def equivalent(student, rng, hidden):
    """smooth(gain, bias, weights, s) divides the norm's gain and bias by s and multiplies the weights' columns by s:
    in float64 the smoothed norm + layers compute the original outputs."""
    def case(generator, channels, outs, bias, alpha):
        layer = _layer(generator, 12, channels, outs, outliers=[0, channels - 1], bias=bias)
        scales_ = smoothquant.smoothing_scales(smoothquant.act_max(layer["X"]), layer["weights"], alpha)
        return {**layer, "scales": scales_}
    fixed = np.random.default_rng(24)
    cases = [case(fixed, 8, [6, 6, 6], True, 0.5), case(fixed, 10, [4], False, 0.8)]  # LayerNorm, RMSNorm
    if hidden:
        cases = [case(rng, int(rng.integers(2, 40)), [int(rng.integers(1, 30)) for _ in range(int(rng.integers(1, 4)))],
                      bool(bias), float(rng.uniform(0.1, 0.9))) for bias in (True, False, True)]
    _equivalent(student, cases, hidden)


@check(points=1)
def w8a8_error(student, rng, hidden):
    """With your scales (alpha 0.5) and smoothing, the W8A8 layer (int8 per token x int8 per channel) on activations
    with outlier channels errs less than without smoothing."""
    fixed = np.random.default_rng(25)
    layers = [_layer(fixed, 64, 32, [16, 16, 16], outliers=[3, 17], magnitude=60.0)]
    if hidden:
        layers = [_layer(rng, 48, int(rng.integers(16, 48)), [int(rng.integers(4, 24))] * 3,
                         outliers=rng.choice(16, int(rng.integers(1, 4)), replace=False), magnitude=magnitude)
                  for magnitude in (30.0, 80.0)]
    for layer in layers:
        weights = layer["weights"]
        got_scales = student.call("smoothing_scales", returns="array", act_max=smoothquant.act_max(layer["X"]),
                                  weights=weights, alpha=0.5)
        smoothed = student.call("smooth", returns="list", gain=layer["gain"], bias=layer["bias"], weights=weights,
                                scales=got_scales)
        try:
            after = smoothquant.w8a8_error(smoothquant.norm(layer["x_in"], smoothed[0], smoothed[1]), smoothed[2])
        except (ValueError, TypeError, IndexError) as error:
            raise CheckFailure(f"the smoothed layer could not be evaluated ({type(error).__name__}): smooth must "
                               "return (gain, bias, [weights]) of the inputs' shapes, finite") from None
        before = smoothquant.w8a8_error(layer["X"], weights)
        exact = smoothquant.norm(layer["x_in"], smoothed[0], smoothed[1])
        outputs = [exact @ np.asarray(w).T for w in smoothed[2]]
        reference = [layer["X"] @ w.T for w in weights]
        if not all(np.allclose(o, r, rtol=OUTPUTS, atol=OUTPUTS * np.abs(r).max()) for o, r in zip(outputs, reference)):
            raise CheckFailure("the smoothed layer no longer computes the original outputs in float64, so its W8A8 "
                               "error means nothing: X / s and W * s must cancel")
        if not after < before:
            raise CheckFailure(f"the smoothed W8A8 error ({shown(after, '.3g')}) is not below the unsmoothed one "
                               f"({shown(before, '.3g')}) on activations with outlier channels")
