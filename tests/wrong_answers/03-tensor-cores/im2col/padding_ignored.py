"""Never pads the input: the windows slide over x itself, so the output is smaller than torch's whenever padding > 0."""

FAILS = ["im2col", "conv2d_gemm", "conv2d_gemm_groups"]


def im2col(x, kernel_size, stride, padding, dilation):
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, stride, dilation
    OH, OW = output_size(H, kh, sh, 0, dh), output_size(W, kw, sw, 0, dw)  # noqa: F821
    columns = np.empty((B, C, kh, kw, OH, OW), dtype=x.dtype)  # noqa: F821
    for p in range(kh):
        for q in range(kw):
            columns[:, :, p, q] = x[:, :, p * dh:p * dh + sh * (OH - 1) + 1:sh, q * dw:q * dw + sw * (OW - 1) + 1:sw]
    return columns.reshape(B, C * kh * kw, OH * OW)
