# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: 2-D max pooling
#
# **You will learn** to write 2-D max pooling over a batch of images with a kernel, a stride, padding
# and a dilation, and the detail interviewers probe most: what the padding holds, so that it never wins
# a maximum.
#
# **The conventions, all of them:**
# - `max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1)`: `x` is a float32 array of shape
#   `(B, C, H, W)` (NCHW) of finite values; `kernel_size`, `stride`, `padding` and `dilation` are ints, the
#   same along H and W; `stride=None` means `stride = kernel_size` (PyTorch's default);
# - the image is padded with `padding` pixels of **-inf** on each of its four sides,
#   `0 <= padding <= kernel_size // 2` (PyTorch's limit): padding never wins a maximum;
# - the window of output `(i, j)` has `kernel_size x kernel_size` taps; tap `(p, q)` is pixel
#   `(i * stride + p * dilation, j * stride + q * dilation)` of the padded image. A window thus spans
#   `dilation * (kernel_size - 1) + 1` pixels along each axis;
# - the output size is `OH = floor((H + 2 * padding - dilation * (kernel_size - 1) - 1) / stride) + 1`
#   (`ceil_mode=False`: a window that would run past the padded image is dropped), and the same for `OW`;
#   the inputs always give `OH, OW >= 1`;
# - a window whose taps all fall on the padding (possible with a dilation: a 1 x 1 image, kernel 2,
#   padding 1, dilation 2) gives -inf, as PyTorch does;
# - the result is the float32 array of the maxima, of shape `(B, C, OH, OW)` (values only, no argmax
#   indices); a maximum is one of the inputs, so it is compared exactly.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/max_pool", globals())

# %% tags=["solution"]
def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1) -> np.ndarray:
    """Max pooling of x (B, C, H, W), padded with -inf: float32 (B, C, OH, OW)."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float32)
    k, p, d = kernel_size, padding, dilation
    s = kernel_size if stride is None else stride
    B, C, H, W = x.shape
    span = d * (k - 1) + 1  # pixels a window covers along each axis
    OH, OW = (H + 2 * p - span) // s + 1, (W + 2 * p - span) // s + 1
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    out = np.full((B, C, OH, OW), -np.inf, dtype=np.float32)
    for dy in range(k):  # tap (dy, dx) of every window at once: a strided slice
        for dx in range(k):
            top, left = dy * d, dx * d
            out = np.maximum(out, padded[:, :, top:top + s * (OH - 1) + 1:s, left:left + s * (OW - 1) + 1:s])
    return out
    ### END SOLUTION


# %% tags=["check"]
check("max_pool")
### BEGIN HIDDEN TESTS
check("max_pool", hidden=True)
### END HIDDEN TESTS
