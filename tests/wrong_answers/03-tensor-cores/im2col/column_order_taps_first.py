"""Orders the column matrix's rows (kh, kw, C), channels innermost; unfold and w.reshape(OC, -1) use (C, kh, kw)."""

FAILS = ["im2col", "conv2d_gemm", "conv2d_gemm_groups"]


def im2col(x, kernel_size, stride, padding, dilation):
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    OH, OW = output_size(H, kh, sh, ph, dh), output_size(W, kw, sw, pw, dw)  # noqa: F821
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # noqa: F821
    columns = np.empty((B, kh, kw, C, OH, OW), dtype=x.dtype)  # noqa: F821
    for p in range(kh):
        for q in range(kw):
            columns[:, p, q] = padded[:, :, p * dh:p * dh + sh * (OH - 1) + 1:sh, q * dw:q * dw + sw * (OW - 1) + 1:sw]
    return columns.reshape(B, kh * kw * C, OH * OW)
