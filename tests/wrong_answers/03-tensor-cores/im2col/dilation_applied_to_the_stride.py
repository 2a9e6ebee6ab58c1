"""Applies the dilation to the window's start (i * stride * dilation + p), not its taps (i * stride + p * dilation)."""

FAILS = ["im2col", "conv2d_gemm", "conv2d_gemm_groups"]


def im2col(x, kernel_size, stride, padding, dilation):
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    OH, OW = output_size(H, kh, sh, ph, dh), output_size(W, kw, sw, pw, dw)  # noqa: F821
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # noqa: F821
    columns = np.zeros((B, C, kh, kw, OH, OW), dtype=x.dtype)  # noqa: F821
    for i in range(OH):
        for j in range(OW):
            window = padded[:, :, i * sh * dh:i * sh * dh + kh, j * sw * dw:j * sw * dw + kw]
            columns[:, :, :window.shape[2], :window.shape[3], i, j] = window  # past the edge: left as zeros
    return columns.reshape(B, C * kh * kw, OH * OW)
