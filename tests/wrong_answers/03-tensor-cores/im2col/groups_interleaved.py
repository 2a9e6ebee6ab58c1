"""Gives group g the input channels g, g + groups, g + 2 groups, ... (interleaved) instead of a consecutive block."""

FAILS = ["conv2d_gemm_groups"]


def conv2d_gemm(x, w, stride, padding, dilation, groups):
    B, C, H, W = x.shape
    OC, C_group, kh, kw = w.shape
    OH = output_size(H, kh, stride[0], padding[0], dilation[0])  # noqa: F821
    OW = output_size(W, kw, stride[1], padding[1], dilation[1])  # noqa: F821
    M = OC // groups
    out = np.empty((B, OC, OH * OW), dtype=x.dtype)  # noqa: F821
    for g in range(groups):
        columns = im2col(x[:, g::groups], (kh, kw), stride, padding, dilation)  # noqa: F821
        out[:, g * M:(g + 1) * M] = w[g * M:(g + 1) * M].reshape(M, -1) @ columns
    return out.reshape(B, OC, OH, OW)
