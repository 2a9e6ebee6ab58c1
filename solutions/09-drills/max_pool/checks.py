"""Checks: 2-D max pooling, padded with -inf, ceil_mode=False.

Visible cases are two small fixed images. Hidden cases add the edges an interviewer probes (an image of
negative values with padding, a 1 x 1 image padded on every side, a window wholly in the padding, dilations,
a stride larger than the kernel, the default stride on sizes it does not divide) and a property check: small
images and geometries drawn by hypothesis, the first failing one shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview.pooling import max_pool2d
from aisys_grader.checks import check, compare_cases, compare_property


def _image(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def _poolings(draw) -> dict:
    k, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    p = draw(st.integers(0, k // 2))
    stride = draw(st.none() | st.integers(1, 3))
    size = st.integers(max(1, d * (k - 1) + 1 - 2 * p), 8)  # at least one window fits
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(size), draw(size))
    values = np.random.default_rng(draw(st.integers(0, 2**16)))  # faster to draw than element by element
    x = values.integers(-8, 9, shape).astype(np.float32)  # half negative: all-negative windows come up often
    return {"x": x, "kernel_size": k, "stride": stride, "padding": p, "dilation": d}


@check(points=2)
def max_pool(student, rng, hidden):
    """max_pool2d(x, kernel_size, stride, padding, dilation): float32 maxima of each window, padding -inf."""
    cases = [{"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 20, "kernel_size": 2},
             {"x": _image(rng, (1, 2, 5, 5)), "kernel_size": 3, "stride": 2, "padding": 1}]
    if hidden:
        cases = [{"x": -1 - np.abs(_image(rng, (1, 2, 4, 5))), "kernel_size": 3, "stride": 1, "padding": 1},
                 {"x": _image(rng, (1, 1, 1, 1)), "kernel_size": 3, "stride": 1, "padding": 1},
                 {"x": _image(rng, (1, 1, 1, 1)), "kernel_size": 2, "stride": 1, "padding": 1, "dilation": 2},
                 {"x": _image(rng, (1, 2, 7, 7)), "kernel_size": 3, "stride": 1, "padding": 0, "dilation": 2},
                 {"x": -np.abs(_image(rng, (2, 1, 8, 9))), "kernel_size": 3, "stride": 2, "padding": 1,
                  "dilation": 2},
                 {"x": _image(rng, (1, 1, 9, 8)), "kernel_size": 2, "stride": 3},
                 {"x": _image(rng, (1, 3, 7, 5)), "kernel_size": 2},  # the stride drops the last row and column
                 {"x": _image(rng, (2, 4, 16, 15)), "kernel_size": 3, "stride": 2, "padding": 1}]
    compare_cases(student, "max_pool2d", cases, max_pool2d, returns="array", hidden=hidden, tolerance=(0, 0),
                  dtype="float32")
    if hidden:
        compare_property(student, "max_pool2d", _poolings(), max_pool2d, rng=rng, returns="array", hidden=hidden,
                         tolerance=(0, 0), dtype="float32")
