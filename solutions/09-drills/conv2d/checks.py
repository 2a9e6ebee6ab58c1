"""Checks: torch.nn.functional.conv2d in float64, against aisys.conv.conv2d (pinned to torch by its tests).

Visible cases are two small fixed layers. Hidden cases add the edges an interviewer probes (a 1x1 kernel,
a kernel filling the padded image, sizes the stride does not divide, a dilation with and without padding,
non-square kernels, groups of several channels, a depthwise layer, no bias) and a property check: small
layers drawn by hypothesis, the first failing one shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.conv import conv2d
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-9, 1e-12)


def _layer(rng, x_shape, w_shape, bias=True, **geometry) -> dict:
    case = {"x": rng.standard_normal(x_shape), "w": rng.standard_normal(w_shape)}
    if bias:
        case["bias"] = rng.standard_normal(w_shape[0])
    return case | geometry


@st.composite
def _layers(draw) -> dict:
    groups, per_in, per_out = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, padding, dilation = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2))
    H = draw(st.integers(max(1, dilation * (kh - 1) + 1 - 2 * padding), 7))  # at least one window fits
    W = draw(st.integers(max(1, dilation * (kw - 1) + 1 - 2 * padding), 7))
    values = np.random.default_rng(draw(st.integers(0, 2**16)))  # faster to draw than element by element
    case = {"x": values.integers(-3, 4, (draw(st.integers(1, 2)), groups * per_in, H, W)).astype(np.float64),
            "w": values.integers(-3, 4, (groups * per_out, per_in, kh, kw)).astype(np.float64)}
    if draw(st.booleans()):
        case["bias"] = values.integers(-3, 4, groups * per_out).astype(np.float64)
    return case | {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


@check(points=3)
def conv2d_layer(student, rng, hidden):
    """conv2d(x, w, bias, stride, padding, dilation, groups): float64 cross-correlation, torch's geometry."""
    cases = [_layer(rng, (1, 1, 5, 5), (1, 1, 3, 3), bias=False),
             _layer(rng, (2, 4, 7, 6), (6, 2, 3, 2), stride=2, padding=1, dilation=2, groups=2)]
    if hidden:
        cases = [_layer(rng, (1, 3, 1, 1), (2, 3, 1, 1)),  # one pixel, a 1x1 kernel
                 _layer(rng, (1, 2, 4, 2), (3, 2, 6, 4), padding=1),  # the kernel fills the padded image
                 _layer(rng, (2, 2, 8, 9), (2, 2, 3, 3), stride=2),  # 8: the last window does not fit; 9: it does
                 _layer(rng, (1, 2, 9, 10), (3, 2, 3, 2), dilation=3),  # dilation without padding
                 _layer(rng, (1, 1, 6, 6), (2, 1, 3, 3), padding=2, dilation=2),  # a "same" dilated layer
                 _layer(rng, (1, 1, 5, 7), (1, 1, 1, 3), bias=False),  # a one-row kernel: no flip along W
                 _layer(rng, (2, 6, 5, 5), (4, 3, 3, 3), padding=1, groups=2),  # groups of three channels
                 _layer(rng, (1, 4, 6, 5), (4, 1, 3, 3), stride=2, padding=1, groups=4),  # depthwise
                 _layer(rng, (2, 8, 12, 11), (8, 2, 3, 3), stride=2, padding=3, dilation=2, groups=4)]
    compare_cases(student, "conv2d", cases, conv2d, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float64")
    if hidden:
        compare_property(student, "conv2d", _layers(), conv2d, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float64")
