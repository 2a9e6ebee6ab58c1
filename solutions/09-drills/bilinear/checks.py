"""Checks: bilinear resizing as torch.nn.functional.interpolate(mode="bilinear"), both align_corners.

Expected values come from aisys.interview.resize, whose tests pin it to torch. Visible cases are two
small fixed images. Hidden cases add the edges an interviewer probes (the same size, a 1 x 1 input, a 1 x 1
output, upsampling where the half-pixel source is negative, downsampling, different heights and widths, in
both modes) and a property check: small images and sizes drawn by hypothesis, the first failing one shrunk to
the smallest.
"""

import numpy as np
from hypothesis import strategies as st

from aisys.interview.resize import resize_bilinear
from aisys_grader.checks import check, compare_cases, compare_property

TOLERANCE = (1e-5, 1e-5)


def _image(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def _resizes(draw) -> dict:
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    values = np.random.default_rng(draw(st.integers(0, 2**16)))  # faster to draw than element by element
    return {"x": values.integers(-8, 9, shape).astype(np.float32),
            "size": (draw(st.integers(1, 9)), draw(st.integers(1, 9))), "align_corners": draw(st.booleans())}


@check(points=2)
def bilinear(student, rng, hidden):
    """resize_bilinear(x, size, align_corners): float32, torch's source coordinates for both align_corners."""
    square = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    cases = [{"x": square, "size": (4, 4), "align_corners": False},
             {"x": square, "size": (3, 5), "align_corners": True}]
    if hidden:
        cases = [{"x": _image(rng, (1, 2, 5, 4)), "size": (5, 4), "align_corners": flag} for flag in (False, True)]
        cases += [{"x": _image(rng, (2, 1, 1, 1)), "size": (3, 4), "align_corners": flag} for flag in (False, True)]
        cases += [{"x": _image(rng, (1, 1, 4, 6)), "size": (1, 1), "align_corners": flag} for flag in (False, True)]
        cases += [{"x": _image(rng, (1, 2, 3, 3)), "size": (8, 7), "align_corners": False},  # src < 0 at the top
                  {"x": _image(rng, (1, 1, 9, 8)), "size": (3, 5), "align_corners": False},  # downsampling
                  {"x": _image(rng, (1, 1, 9, 8)), "size": (4, 3), "align_corners": True},
                  {"x": _image(rng, (1, 1, 2, 7)), "size": (6, 3), "align_corners": True},  # H up, W down
                  {"x": _image(rng, (2, 3, 13, 17)), "size": (29, 7), "align_corners": False}]
    compare_cases(student, "resize_bilinear", cases, resize_bilinear, returns="array", hidden=hidden,
                  tolerance=TOLERANCE, dtype="float32")
    if hidden:
        compare_property(student, "resize_bilinear", _resizes(), resize_bilinear, rng=rng, returns="array",
                         hidden=hidden, tolerance=TOLERANCE, dtype="float32")
