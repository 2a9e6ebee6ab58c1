"""Builds the results with np.zeros(shape), which is float64: integer inputs come back as floats, rounded past 2**53."""

FAILS = ["im2col", "conv2d_gemm", "conv2d_gemm_groups"]


def im2col(x, kernel_size, stride, padding, dilation):
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    OH, OW = output_size(H, kh, sh, ph, dh), output_size(W, kw, sw, pw, dw)  # noqa: F821
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # noqa: F821
    columns = np.zeros((B, C, kh, kw, OH, OW))  # noqa: F821
    for p in range(kh):
        for q in range(kw):
            top, left = p * dh, q * dw
            columns[:, :, p, q] = padded[:, :, top:top + sh * (OH - 1) + 1:sh, left:left + sw * (OW - 1) + 1:sw]
    return columns.reshape(B, C * kh * kw, OH * OW)
