# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: 2-D convolution
#
# **You will learn** to write the convolution layer of every vision network, `torch.nn.functional.conv2d`,
# with stride, padding, dilation and groups, and the three details interviewers probe: that a deep-learning
# convolution does not flip its kernel, how a dilation changes the output size, and which channels a group sees.
#
# **The conventions, all of them:**
# - `conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1)`: `x` is a float64 array of shape
#   `(B, C_in, H, W)` (NCHW); `w` a float64 array of shape `(C_out, C_in // groups, kH, kW)`; `bias` None or
#   a float64 array of shape `(C_out,)`; `stride`, `padding` and `dilation` are ints, the same along H and W;
#   `groups` divides both `C_in` and `C_out`;
# - it is a **cross-correlation**, as in every deep-learning framework (the kernel is not flipped):
#   `out[b, o, i, j] = bias[o] + sum over c, p, q of w[o, c, p, q] * xp[b, g * C_in // groups + c,
#   i * stride + p * dilation, j * stride + q * dilation]`, where `xp` is `x` padded with `padding` zeros
#   on each of its four sides and `g = o // (C_out // groups)` is the group of output channel `o`;
# - groups split the channels into **contiguous** blocks: group `g` holds input channels
#   `g * C_in // groups ... (g + 1) * C_in // groups - 1` and output channels
#   `g * C_out // groups ... (g + 1) * C_out // groups - 1`; an output channel sees only its group's inputs
#   (`groups = C_in = C_out` is a depthwise convolution);
# - the output size is `OH = floor((H + 2 * padding - dilation * (kH - 1) - 1) / stride) + 1`, and the same
#   for `OW` with `W` and `kW`; the inputs always give `OH, OW >= 1`; padding may be any int >= 0;
# - the result is a float64 array of shape `(B, C_out, OH, OW)`, compared with a relative tolerance of 1e-9
#   and an absolute one of 1e-12 (any order of summation passes).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/conv2d", globals())

# %% tags=["solution"]
def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """torch.nn.functional.conv2d in float64: a cross-correlation, (B, C_out, OH, OW)."""
    ### BEGIN SOLUTION
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    B, C, H, W = x.shape
    OC, Cg, kh, kw = w.shape
    s, p, d, g = stride, padding, dilation, groups
    OH = (H + 2 * p - d * (kh - 1) - 1) // s + 1
    OW = (W + 2 * p - d * (kw - 1) - 1) // s + 1
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    xg = padded.reshape(B, g, Cg, H + 2 * p, W + 2 * p)  # contiguous blocks of channels per group
    wg = w.reshape(g, OC // g, Cg, kh, kw)
    out = np.zeros((B, g, OC // g, OH, OW))
    for i in range(kh):  # tap (i, j) of every window at once: a strided slice
        for j in range(kw):
            top, left = i * d, j * d
            patch = xg[:, :, :, top:top + s * (OH - 1) + 1:s, left:left + s * (OW - 1) + 1:s]
            out += np.einsum("bgchw,goc->bgohw", patch, wg[:, :, :, i, j])
    out = out.reshape(B, OC, OH, OW)
    if bias is not None:
        out += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return out
    ### END SOLUTION


# %% tags=["check"]
check("conv2d_layer")
### BEGIN HIDDEN TESTS
check("conv2d_layer", hidden=True)
### END HIDDEN TESTS
