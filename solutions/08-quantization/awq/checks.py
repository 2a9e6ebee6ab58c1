"""Checks: AWQ's scale search for one linear layer, and the weight it gives.

search: (ratio, scales, errors) against the reference on layers with and without salient input channels, 4 and
3 bits, two group sizes, and (hidden) inputs whose channels all have one mean magnitude, where every ratio gives
s = 1 and the same error: the first ratio, 0, wins. never_worse_than_rtn: the first grid point is round-to-nearest
(its error equals RTN's, computed here) and the best error is at most RTN's, on every case. salient_channels: a few
input channels with large activations (and small weights, so that a weight-magnitude search would not pick them)
get scales above 1 and above every other channel's. dead_channel: an input channel that is always 0 (and one that
all but is): no NaN or inf, and the reference's answer. quantized_weight: awq_quantize against the reference, as
float32, and equal to the group quantizer applied at the student's own searched scales.

Hidden cases draw sizes, salient channels and magnitudes from the seed.
"""

import numpy as np

from aisys.quant import awq
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown

VALUES = (1e-9, 0.0)  # scales and errors: float64 in another order differs by a few ulps; a wrong search by far more
WEIGHT = (1e-6, 1e-9)  # the float32 quantized weight (rounded once to float32; atol for its exact zeros)


def _layer(rng, out, channels, tokens, *, salient=(), magnitude=20.0, bits=4, group_size=16, n_grid=20):
    """A layer whose inputs have `salient` channels `magnitude` times the rest, and half-size weights there."""
    weight = 0.05 * rng.standard_normal((out, channels))
    x = rng.standard_normal((tokens, channels))
    salient = list(salient)
    x[:, salient] *= magnitude
    weight[:, salient] *= 0.5  # salient by activation, not by weight
    return {"weight": weight, "x": x, "bits": bits, "group_size": group_size, "n_grid": n_grid}


def _reference(weight, x, bits, group_size, n_grid):
    return tuple(awq.search_scale(weight, x, bits=bits, group_size=group_size, n_grid=n_grid))


def _unpack(got, case):
    """The student's (ratio, scales, errors), checked for form."""
    if not isinstance(got, list) or len(got) != 3:
        raise CheckFailure(f"search_scale must return (ratio, scales, errors), got {describe(got)}")
    ratio, scales, errors = got
    if not isinstance(ratio, (int, float)):
        raise CheckFailure(f"the ratio must be a number, got {describe(ratio)}")
    channels, n_grid = case["weight"].shape[1], case["n_grid"]
    for where, value, shape in (("scales", scales, (channels,)), ("errors", errors, (n_grid,))):
        assert_format(value, "float64", where=where)
        if np.shape(value) != shape:
            raise CheckFailure(f"{where} must have shape {shown(shape)}, got {shown(np.shape(value))}")
        if not np.isfinite(value).all():
            raise CheckFailure(f"{where} hold NaN or inf")
    return float(ratio), np.asarray(scales), np.asarray(errors)


def _compare_search(got, expected, case):
    ratio, scales, errors = _unpack(got, case)
    assert_close(errors, expected[2], rtol=VALUES[0], atol=VALUES[1], where="errors (one per ratio, in grid order)")
    if ratio != expected[0]:
        raise CheckFailure(f"chose ratio {shown(ratio)}, where the least output error (the first of equal ones) is "
                           f"at {shown(expected[0])}")
    assert_close(scales, expected[1], rtol=VALUES[0], atol=VALUES[1], where="scales")


def _search_hint(case, got, expected) -> str:
    """Which usual mistake the student's (ratio, scales, errors) shows, or ""."""
    try:
        ratio, scales, errors = _unpack(got, case)
    except CheckFailure:
        return ""
    weight, x = case["weight"], case["x"]
    rtn = awq.output_error(x, weight, awq.rtn(weight, bits=case["bits"], group_size=case["group_size"]))
    if not np.isclose(scales.max() * scales.min(), 1.0, rtol=1e-9):
        return "Your scales are not normalised: divide s by sqrt(s.max() * s.min()), so that max * min is 1"
    if not np.isclose(errors[0], rtn, rtol=VALUES[0]):
        return ("errors[0] is not round-to-nearest's output error: the grid starts at r = 0 (every s = 1), and the "
                "error is mean((x @ weight.T - x @ w_q.T) ** 2), on the outputs")
    if 0 < ratio <= 1 and np.allclose(scales, awq.grid_scales(np.abs(weight).mean(axis=0), ratio), rtol=1e-9):
        return "These scales follow the weight's magnitude: AWQ's follow the activation's, mean |x| per channel"
    return ""


def _search(student, cases, hidden):
    compare_cases(student, "search_scale", cases, _reference, returns="list", hidden=hidden, compare=_compare_search,
                  hint=_search_hint)


def _cases(rng, hidden):
    fixed = np.random.default_rng(20)
    cases = [_layer(fixed, 8, 32, 32, salient=[5]), _layer(fixed, 6, 48, 24, salient=[0, 30], bits=3,
                                                          group_size=24)]
    if hidden:
        cases = []
        for _ in range(3):
            channels = int(rng.choice([16, 32, 48]))
            cases.append(_layer(rng, int(rng.integers(1, 12)), channels, int(rng.integers(1, 40)),
                                salient=rng.choice(channels, int(rng.integers(0, 4)), replace=False),
                                magnitude=float(rng.uniform(3, 50)), bits=int(rng.choice([3, 4])),
                                group_size=int(rng.choice([8, 16])), n_grid=int(rng.choice([10, 20]))))
    return cases


@check(points=2)
def search(student, rng, hidden):
    """search_scale(weight, x, bits, group_size, n_grid): the ratio of least output error, its scales, every error."""
    cases = _cases(rng, hidden)
    if hidden:
        flat = _layer(rng, 4, 16, 8)
        flat["x"] = np.where(rng.random((8, 16)) < 0.5, -1.5, 1.5)  # every channel's mean |x| is 1.5: s = 1 always
        cases.append(flat)
    _search(student, cases, hidden)


@check(points=1)
def never_worse_than_rtn(student, rng, hidden):
    """The grid starts at r = 0, where s = 1 and the weight is round-to-nearest's: errors[0] is RTN's error, and the
    chosen error is at most that, on every case."""
    for case in _cases(rng, hidden) + [_layer(np.random.default_rng(21), 4, 16, 16, salient=[3], magnitude=8.0)]:
        got = student.call("search_scale", returns="list", **case)
        ratio, _, errors = _unpack(got, case)
        rtn = awq.output_error(case["x"], case["weight"], awq.rtn(case["weight"], bits=case["bits"],
                                                                  group_size=case["group_size"]))
        if not np.isclose(errors[0], rtn, rtol=VALUES[0], atol=0):
            raise CheckFailure(f"errors[0] is {shown(errors[0], '.6g')}, not round-to-nearest's output error "
                               f"{shown(rtn, '.6g')}: the grid's first ratio is 0 (s = 1), which is RTN")
        if not errors.min() <= rtn * (1 + VALUES[0]):
            raise CheckFailure(f"the chosen output error {shown(errors.min(), '.6g')} is above RTN's "
                               f"{shown(rtn, '.6g')}: with r = 0 in the grid the search cannot do worse")


@check(points=1)
def salient_channels(student, rng, hidden):
    """Input channels with large activations (and small weights) get scales > 1, larger than every other one's."""
    generator = np.random.default_rng(22) if not hidden else rng
    channels = 32 if not hidden else int(rng.choice([32, 48]))
    salient = [3, 20] if not hidden else list(rng.choice(channels, int(rng.integers(1, 3)), replace=False))
    magnitude = 20.0 if not hidden else float(rng.uniform(15, 40))
    case = _layer(generator, 8, channels, 32, salient=salient, magnitude=magnitude)
    _, scales, _ = _unpack(student.call("search_scale", returns="list", **case), case)
    others = np.delete(scales, salient)
    if not (scales[salient] > 1).all() or not scales[salient].min() > others.max():
        got = ", ".join(f"{v:.3g}" for v in scales[salient])
        raise CheckFailure(f"the salient channels (mean |x| {shown(magnitude, '.3g')} times the others') got scales "
                           f"{shown(got)}, the others up to {shown(others.max(), '.3g')}: AWQ scales up the "
                           "channels whose activations are large (x_mean ** r), whatever their weights")


@check(points=1)
def dead_channel(student, rng, hidden):
    """An input channel that is always 0: s = max(0 ** r, 1e-4), finite; no NaN or inf anywhere."""
    generator = np.random.default_rng(23) if not hidden else rng
    cases = []
    for tiny in (0.0, 1e-9):
        case = _layer(generator, 6, 32, 16, salient=[7])
        case["x"][:, 2] = tiny  # dead (or all but): its s is the clamp, 1e-4, before the normalisation
        cases.append(case)
    _search(student, cases, hidden)


def _compare_weight(student):
    def compare(got, expected, case):
        assert_format(got, "float32", where="the quantized weight")
        if np.shape(got) != case["weight"].shape:
            raise CheckFailure(f"the quantized weight must have weight's shape {shown(case['weight'].shape)}, got "
                               f"{shown(np.shape(got))}")
        _, scales, _ = _unpack(student.call("search_scale", returns="list", n_grid=20, **case), {**case, "n_grid": 20})
        own = awq.quantize_scaled(case["weight"], scales, bits=case["bits"], group_size=case["group_size"])
        assert_close(got, own.astype(np.float32), rtol=WEIGHT[0], atol=WEIGHT[1],
                     where="the weight against quantize_group(weight * s) / s at your own searched s")
        assert_close(got, expected, rtol=WEIGHT[0], atol=WEIGHT[1], where="the quantized weight")
    return compare


@check(points=1)
def quantized_weight(student, rng, hidden):
    """awq_quantize(weight, x, bits, group_size): quantize_group(weight * s) / s at the searched s, float32."""
    cases = [{k: v for k, v in case.items() if k != "n_grid"} for case in _cases(rng, hidden)]
    compare_cases(student, "awq_quantize", cases,
                  lambda weight, x, bits, group_size: awq.awq_quantize(weight, x, bits=bits, group_size=group_size),
                  returns="array", hidden=hidden, compare=_compare_weight(student))
