"""Checks: 2-D average pooling, count_include_pad=False, ceil_mode=False.

Visible cases are two small fixed images. Hidden cases add the edges an interviewer probes (a 1 x 1 image
padded on every side, a 1 x 1 kernel, sizes the stride does not divide, a stride larger than the kernel,
an image with zeros, the default stride) and a property check: small images and geometries drawn by
hypothesis, the first failing one shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview.pooling import avg_pool2d
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-5, 1e-5)


def _image(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def _poolings(draw) -> dict:
    k = draw(st.integers(1, 4))
    p = draw(st.integers(0, k // 2))
    stride = draw(st.none() | st.integers(1, 3))
    size = st.integers(max(1, k - 2 * p), 8)  # at least one window fits
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(size), draw(size))
    values = np.random.default_rng(draw(st.integers(0, 2**16)))  # faster to draw than element by element
    x = values.integers(-8, 9, shape).astype(np.float32)  # small integers: zeros come up often
    return {"x": x, "kernel_size": k, "stride": stride, "padding": p}


@check(points=2)
def avg_pool(student, rng, hidden):
    """avg_pool2d(x, kernel_size, stride, padding): float32 means of the image's pixels in each window."""
    cases = [{"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), "kernel_size": 2},
             {"x": _image(rng, (1, 2, 5, 5)), "kernel_size": 3, "stride": 2, "padding": 1}]
    if hidden:
        relu = np.maximum(_image(rng, (1, 2, 6, 6)), 0)  # zeros of the image count
        cases = [{"x": _image(rng, (1, 1, 1, 1)), "kernel_size": 3, "stride": 1, "padding": 1},
                 {"x": _image(rng, (2, 1, 3, 4)), "kernel_size": 1},
                 {"x": _image(rng, (1, 3, 7, 5)), "kernel_size": 2},  # the stride drops the last row and column
                 {"x": _image(rng, (1, 1, 9, 8)), "kernel_size": 2, "stride": 3, "padding": 1},
                 {"x": relu, "kernel_size": 3, "stride": 1, "padding": 0},
                 {"x": _image(rng, (2, 4, 17, 13)), "kernel_size": 3, "stride": 2, "padding": 1},
                 {"x": _image(rng, (1, 2, 10, 11)), "kernel_size": 4, "stride": None, "padding": 2}]
    compare_cases(student, "avg_pool2d", cases, avg_pool2d, returns="array", hidden=hidden, tolerance=TOLERANCE,
                  dtype="float32")
    if hidden:
        compare_property(student, "avg_pool2d", _poolings(), avg_pool2d, rng=rng, returns="array", hidden=hidden,
                         tolerance=TOLERANCE, dtype="float32")
