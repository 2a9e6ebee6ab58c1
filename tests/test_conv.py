"""The convolution reference against torch: im2col equals unfold, conv2d equals conv2d, Winograd equals both."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from aisys import conv, roofline

GEOMETRIES = [  # (x shape, kernel_size, stride, padding, dilation, groups)
    ((1, 1, 1, 1), 1, 1, 0, 1, 1),  # one pixel, a 1x1 kernel
    ((2, 3, 7, 7), 3, 1, 1, 1, 1),  # "same" padding
    ((1, 4, 9, 6), (3, 2), (2, 1), (2, 1), (1, 2), 2),  # non-square everything, groups
    ((3, 2, 8, 11), (1, 4), (3, 2), (0, 3), (3, 1), 1),  # padding larger than half the kernel
    ((1, 6, 10, 10), 3, 2, 0, 2, 6),  # depthwise, stride 2, dilation 2; the last window does not fit
    ((2, 4, 5, 5), 5, 1, 0, 1, 4),  # kernel as large as the input: one output
]


def _torch(function, x, *args, **kwargs):
    return function(torch.from_numpy(x), *args, **kwargs).numpy()


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, groups", GEOMETRIES)
def test_im2col_equals_unfold(shape, kernel, stride, padding, dilation, groups):
    x = np.random.default_rng(0).standard_normal(shape)
    expected = _torch(F.unfold, x, kernel, stride=stride, padding=padding, dilation=dilation)
    np.testing.assert_array_equal(conv.im2col(x, kernel, stride, padding, dilation), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, groups", GEOMETRIES)
def test_conv2d_equals_torch_for_floats(shape, kernel, stride, padding, dilation, groups, dtype):
    rng = np.random.default_rng(1)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((2 * groups, shape[1] // groups, kh, kw)).astype(dtype)
    bias = rng.standard_normal(2 * groups).astype(dtype)
    got = conv.conv2d(x, w, bias, stride, padding, dilation, groups)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias), stride, padding,
                        dilation, groups).numpy()
    assert got.dtype == dtype and got.flags.c_contiguous
    np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, groups", GEOMETRIES)
def test_conv2d_is_exact_for_integers_beyond_float64(shape, kernel, stride, padding, dilation, groups):
    """Products near 2**52 and their sums beyond 2**53: float64 would round them, an int64 GEMM does not."""
    rng = np.random.default_rng(2)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = rng.integers(-2**26, 2**26, shape)
    w = rng.integers(-2**26, 2**26, (3 * groups, shape[1] // groups, kh, kw))
    got = conv.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    expected = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, stride, padding, dilation, groups).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 40), kernel=st.integers(1, 7), stride=st.integers(1, 4), padding=st.integers(0, 4),
       dilation=st.integers(1, 3))
def test_output_size_is_pytorchs_formula_or_a_clear_error(size, kernel, stride, padding, dilation):
    try:
        expected = torch.nn.Conv2d(1, 1, (1, kernel), (1, stride), (0, padding), (1, dilation))(
            torch.zeros(1, 1, 1, size)).shape[-1]
    except RuntimeError:  # torch refuses a kernel larger than the padded input
        with pytest.raises(ValueError, match="kernel spans"):
            conv.output_size(size, kernel, stride, padding, dilation)
        return
    assert conv.output_size(size, kernel, stride, padding, dilation) == expected


def test_output_size_floors_a_last_window_that_does_not_fit():
    assert conv.output_size(7, 3, stride=2) == 3  # windows at 0, 2, 4
    assert conv.output_size(8, 3, stride=2) == 3  # a window at 6 would need pixels 6..8
    assert conv.output_size(5, 3, dilation=2) == 1  # the kernel spans 5 pixels
    assert conv.output_size(1, 1) == 1


def test_gemm_shape_and_cost_of_a_resnet50_layer():
    """conv2_x's 3x3 layer at batch 32: 64 -> 64 channels on 56x56, stride 1, padding 1."""
    shape = conv.gemm_shape((32, 64, 56, 56), (64, 64, 3, 3), padding=1)
    assert shape == conv.GemmShape(M=64, N=32 * 56 * 56, K=64 * 9, count=1)
    cost = conv.conv2d_cost((32, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype="bf16")
    assert cost.flops == shape.flops == 2 * 64 * 64 * 9 * 32 * 56 * 56
    assert cost.bytes == (2 * 32 * 64 * 56 * 56 + 64 * 64 * 9) * 2
    # Reading the column matrix instead of x costs the GEMM about five times the intensity here.
    explicit = roofline.gemm(shape.M, shape.N, shape.K, "bf16")
    assert explicit.flops == cost.flops and cost.intensity / explicit.intensity == pytest.approx(5, rel=0.01)


def test_depthwise_gemm_is_one_small_gemm_per_channel():
    shape = conv.gemm_shape((32, 144, 56, 56), (144, 1, 3, 3), padding=1, groups=144)
    assert (shape.M, shape.K, shape.count) == (1, 9, 144)


def test_im2col_expansion_is_kh_kw_for_same_padding():
    assert conv.im2col_expansion(56, 56, 3, padding=1) == 9
    assert conv.im2col_expansion(56, 56, 1) == 1
    assert conv.im2col_expansion(224, 224, 7, stride=2, padding=3) == 49 / 4
    x = np.zeros((2, 3, 10, 12))
    assert conv.im2col(x, (3, 5), padding=(1, 2)).size == conv.im2col_expansion(10, 12, (3, 5), padding=(1, 2)) * x.size


def test_winograd_f23_matches_the_direct_correlation_with_four_multiplications():
    d, g = np.array([1.0, 2.0, -3.0, 0.5]), np.array([0.25, -1.0, 2.0])
    np.testing.assert_allclose(conv.winograd_f23(d, g), [d[0:3] @ g, d[1:4] @ g])
    assert (conv.winograd_multiplications(2, 3), conv.direct_multiplications(2, 3)) == (4, 6)
    assert (conv.winograd_multiplications(2, 3, dims=2), conv.direct_multiplications(2, 3, dims=2)) == (16, 36)


def test_winograd_f23_tile_matches_the_direct_correlation():
    rng = np.random.default_rng(3)
    d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    expected = [[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(conv.winograd_f23_tile(d, g), expected, rtol=1e-12)


@pytest.mark.parametrize("m, r", [(2, 3), (3, 3), (4, 3), (6, 3), (2, 5), (1, 1), (3, 2)])
def test_winograd_matrices_compute_the_correlation(m, r):
    AT, G, BT = conv.winograd_matrices(m, r)
    n = m + r - 1
    assert (AT.shape, G.shape, BT.shape) == ((m, n), (n, r), (n, n))
    rng = np.random.default_rng(4)
    d, g = rng.standard_normal(n), rng.standard_normal(r)
    np.testing.assert_allclose(AT @ ((G @ g) * (BT @ d)), [d[i:i + r] @ g for i in range(m)], atol=1e-12)


def test_winograd_matrices_of_f43_are_lavin_and_grays():
    AT, G, BT = conv.winograd_matrices(4, 3)
    np.testing.assert_allclose(G[:3], [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6]])
    np.testing.assert_array_equal(BT[0], [4, 0, -5, 0, 1, 0])
    np.testing.assert_array_equal(AT[-1], [0, 1, -1, 8, -8, 1])


@pytest.mark.parametrize("m", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("shape, padding", [((1, 1, 3, 3), 0), ((2, 3, 8, 8), 1), ((1, 4, 7, 10), 2)])
def test_winograd_conv2d_equals_conv2d(shape, padding, m):
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(shape), rng.standard_normal((5, shape[1], 3, 3))
    np.testing.assert_allclose(conv.winograd_conv2d(x, w, padding, m), conv.conv2d(x, w, padding=padding),
                               rtol=1e-10, atol=1e-10)


def test_winograd_loses_accuracy_with_the_tile_in_float16():
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 16, 16, 16)), rng.standard_normal((16, 16, 3, 3)) / 12
    truth = conv.conv2d(x, w, padding=1)

    def error(m):
        y = conv.winograd_conv2d(x.astype(np.float16), w.astype(np.float16), 1, m)
        assert y.dtype == np.float16
        return np.abs(y - truth).max() / np.abs(truth).max()

    assert error(2) < 3e-3 and error(6) > 3 * error(2)


BAD_CALLS = [
    (lambda: conv.im2col(np.zeros((3, 4, 4)), 3), ValueError, "x must be a 4-D array"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4), dtype=bool), 3), TypeError, "x must hold integers or floats"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4), dtype=complex), 3), TypeError, "x must hold"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 0), ValueError, "kernel_size must be an integer >= 1"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), (3, 3, 3)), TypeError, "kernel_size must be an int or a pair"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 3, stride=0), ValueError, "stride must be an integer >= 1"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 3, stride=(1, -1)), ValueError, r"stride\[1\] must be"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 3, dilation=0), ValueError, "dilation must be an integer >= 1"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 3, padding=-1), ValueError, "padding must be an integer >= 0"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 4)), 3, padding=1.5), ValueError, "padding must be an integer"),
    (lambda: conv.im2col(np.zeros((1, 1, 4, 9)), 3, dilation=2), ValueError, r"kernel_size, along H\) spans 5"),
    (lambda: conv.conv2d(np.zeros((1, 1, 4, 4)), np.zeros((2, 1, 5, 5))), ValueError, "kernel_size, along H"),
    (lambda: conv.conv2d(np.zeros((1, 4, 4, 4)), np.zeros((2, 3, 3, 3))), ValueError, r"w.shape\[1\] == C / groups"),
    (lambda: conv.conv2d(np.zeros((1, 4, 4, 4)), np.zeros((2, 4, 3, 3)), groups=2), ValueError,
     r"expected w.shape\[1\] == C / groups = 2"),
    (lambda: conv.conv2d(np.zeros((1, 3, 4, 4)), np.zeros((2, 1, 3, 3)), groups=2), ValueError,
     "groups .2. must divide x's channels"),
    (lambda: conv.conv2d(np.zeros((1, 4, 4, 4)), np.zeros((3, 2, 3, 3)), groups=2), ValueError,
     "must divide w's output channels"),
    (lambda: conv.conv2d(np.zeros((1, 4, 4, 4)), np.zeros((2, 4, 3, 3)), groups=0), ValueError, "groups must be"),
    (lambda: conv.conv2d(np.zeros((1, 1, 4, 4)), np.zeros((2, 1, 3)),), ValueError, "w must be a 4-D array"),
    (lambda: conv.conv2d(np.zeros((1, 1, 4, 4)), np.zeros((2, 1, 3, 3), np.float32)), TypeError, "w has dtype"),
    (lambda: conv.conv2d(np.zeros((1, 1, 4, 4)), np.zeros((2, 1, 3, 3)), np.zeros(3)), ValueError, "bias must"),
    (lambda: conv.gemm_shape((1, 1, 4), (1, 1, 1, 1)), ValueError, "x_shape must be a 4-D shape"),
    (lambda: conv.output_size(0, 1), ValueError, "size must be an integer >= 1"),
    (lambda: conv.output_size(3, 5), ValueError, "kernel spans 5 pixels"),
    (lambda: conv.im2col_expansion(0, 4, 1), ValueError, "height must be"),
    (lambda: conv.winograd_f23([1, 2, 3], [1, 2, 3]), ValueError, "d must be a vector of 4"),
    (lambda: conv.winograd_f23([1, 2, 3, 4], [1, 2]), ValueError, "g must be a vector of 3"),
    (lambda: conv.winograd_f23_tile(np.zeros((4, 4)), np.zeros((3, 4))), ValueError, "g a 3x3"),
    (lambda: conv.winograd_matrices(0, 3), ValueError, "m must be an integer >= 1"),
    (lambda: conv.winograd_matrices(12, 3), ValueError, "finite points"),
    (lambda: conv.winograd_conv2d(np.zeros((1, 1, 4, 4), int), np.zeros((1, 1, 3, 3), int)), TypeError, "floats"),
    (lambda: conv.winograd_conv2d(np.zeros((1, 1, 4, 4)), np.zeros((1, 1, 3, 2))), ValueError, "square filters"),
    (lambda: conv.winograd_conv2d(np.zeros((1, 2, 4, 4)), np.zeros((1, 1, 3, 3))), ValueError, "input channels"),
    (lambda: conv.winograd_conv2d(np.zeros((1, 1, 2, 4)), np.zeros((1, 1, 3, 3))), ValueError, "w, along H"),
    (lambda: conv.direct_multiplications(2, 3, dims=0), ValueError, "dims must be"),
]


@pytest.mark.parametrize("call, error, message", BAD_CALLS, ids=[m for _, _, m in BAD_CALLS])
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()
