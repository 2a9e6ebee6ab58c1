"""Flips the kernel, as convolution in signal processing does; a deep-learning conv2d is a cross-correlation."""

FAILS = ["conv2d_gemm", "conv2d_gemm_groups"]

_conv2d_gemm = conv2d_gemm  # noqa: F821


def conv2d_gemm(x, w, stride, padding, dilation, groups):
    return _conv2d_gemm(x, w[:, :, ::-1, ::-1], stride, padding, dilation, groups)
