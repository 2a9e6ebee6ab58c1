"""Rounds the number of windows up (ceil), counting a last window that runs past the padded input."""

FAILS = ["output_size", "im2col", "conv2d_gemm", "conv2d_gemm_groups"]


def output_size(size, kernel, stride, padding, dilation):
    return -(-(size + 2 * padding - dilation * (kernel - 1) - 1) // stride) + 1
