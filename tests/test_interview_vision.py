"""The vision drills' references against torch: pooling equals F.avg_pool2d / F.max_pool2d, resizing equals
F.interpolate(mode="bilinear") for both align_corners; NMS on hand-worked cases."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aisys.interview.detection import nms
from aisys.interview.pooling import avg_pool2d, max_pool2d
from aisys.interview.resize import resize_bilinear

POOLINGS = [  # (H, W, kernel, stride, padding, dilation)
    (1, 1, 1, None, 0, 1), (1, 1, 3, 1, 1, 1), (7, 5, 2, None, 0, 1), (8, 9, 3, 2, 1, 1), (9, 8, 2, 3, 1, 1),
    (7, 7, 3, 1, 0, 2), (8, 9, 3, 2, 1, 2), (1, 1, 2, 1, 1, 2), (10, 11, 4, None, 2, 1),
]


@pytest.mark.parametrize("H, W, kernel, stride, padding, dilation", POOLINGS)
def test_pooling_equals_torch(H, W, kernel, stride, padding, dilation):
    x = np.random.default_rng(0).standard_normal((2, 3, H, W)).astype(np.float32) - 2  # mostly negative
    expected = F.max_pool2d(torch.from_numpy(x), kernel, stride, padding, dilation).numpy()
    np.testing.assert_array_equal(max_pool2d(x, kernel, stride, padding, dilation), expected)
    if dilation == 1:
        average = F.avg_pool2d(torch.from_numpy(x), kernel, stride, padding, count_include_pad=False).numpy()
        got = avg_pool2d(x, kernel, stride, padding)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, average, rtol=1e-6, atol=1e-6)


def test_pooling_rejects_padding_over_half_the_kernel_and_empty_outputs():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="padding"):
        avg_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="kernel"):
        max_pool2d(x, 3, dilation=2)


@pytest.mark.parametrize("align_corners", [False, True])
def test_resize_bilinear_equals_torch(align_corners):
    rng = np.random.default_rng(1)
    for H, W, out_h, out_w in itertools.product([1, 2, 5], [1, 4, 7], [1, 3, 11], [1, 2, 16]):
        x = rng.standard_normal((2, 2, H, W))
        expected = F.interpolate(torch.from_numpy(x), size=(out_h, out_w), mode="bilinear",
                                 align_corners=align_corners).numpy()
        np.testing.assert_allclose(resize_bilinear(x, (out_h, out_w), align_corners), expected, rtol=1e-12,
                                   atol=1e-12)


def test_resize_bilinear_keeps_float32_and_checks_its_size():
    x = np.ones((1, 1, 2, 3), np.float32)
    assert resize_bilinear(x, (4, 5)).dtype == np.float32
    with pytest.raises(ValueError, match="size"):
        resize_bilinear(x, (0, 5))


def test_nms_keeps_at_the_threshold_breaks_ties_by_index_and_lets_suppressed_boxes_be():
    assert nms([[0, 0, 4, 1], [0, 0, 2, 1]], [0.9, 0.8], 0.5).tolist() == [0, 1]  # IoU 0.5 is not above 0.5
    assert nms([[0, 0, 2, 2], [0, 0, 2, 2], [5, 5, 6, 6]], [0.7, 0.7, 0.7], 0.5).tolist() == [0, 2]
    assert nms([[0, 0, 2, 1], [1, 0, 3, 1], [2, 0, 4, 1]], [0.9, 0.8, 0.7], 0.3).tolist() == [0, 2]  # a chain
    empty = nms(np.zeros((0, 4)), np.zeros(0), 0.5)
    assert empty.dtype == np.int64 and empty.shape == (0,)
    with pytest.raises(ValueError, match="iou_threshold"):
        nms([[0, 0, 1, 1]], [1.0], 1.5)
