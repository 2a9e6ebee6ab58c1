# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: bilinear resizing
#
# **You will learn** to resize a batch of images with bilinear interpolation exactly as
# `torch.nn.functional.interpolate(x, size, mode="bilinear", align_corners=...)` does, including the two
# meanings of `align_corners` and the clamp at the border that interviewers (and ports between frameworks)
# trip on.
#
# **The conventions, all of them:**
# - `resize_bilinear(x, size, align_corners=False)`: `x` is a float32 array of shape `(B, C, H, W)` (NCHW);
#   `size` is the pair `(out_h, out_w)`, **height first** (as PyTorch, not as OpenCV's `(width, height)`),
#   each >= 1; `align_corners` is `True` or `False`;
# - rows and columns are handled alike and independently. Output row `i` (for `i = 0 ... out_h - 1`) reads
#   the input at the source coordinate
#   - `align_corners=True`: `src = i * (H - 1) / (out_h - 1)`, and `src = 0` when `out_h == 1` (the corner
#     pixels' centres of input and output coincide);
#   - `align_corners=False`: `src = (i + 0.5) * H / out_h - 0.5` (half-pixel centres), then
#     `src = max(src, 0)`: a negative source coordinate is **clamped to 0**;
# - the output interpolates linearly between input rows `i0 = floor(src)` and `i1 = min(i0 + 1, H - 1)`
#   with weight `t = src - i0` on `i1` and `1 - t` on `i0`; columns alike (with `W` and `out_w`), and the
#   bilinear weights are the products of the row and column weights;
# - an input of one row or column (`H == 1` or `W == 1`) is constant along that axis;
# - the result is a float32 array of shape `(B, C, out_h, out_w)`, compared with a relative tolerance of 1e-5
#   and an absolute one of 1e-5 (computing the coordinates and weights in float32 or float64 both pass).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/bilinear", globals())

# %% tags=["solution"]
def resize_bilinear(x, size, align_corners=False) -> np.ndarray:
    """x (B, C, H, W) resized to size = (out_h, out_w) as F.interpolate(mode="bilinear"): float32."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    out_h, out_w = size

    def source(n_in, n_out):
        """The rows i0, i1 each output reads along one axis, and the weight of i1."""
        i = np.arange(n_out, dtype=np.float64)
        if align_corners:
            src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
        else:
            src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0)
        i0 = np.floor(src).astype(np.int64)
        return i0, np.minimum(i0 + 1, n_in - 1), src - i0

    r0, r1, ty = source(x.shape[2], out_h)
    c0, c1, tx = source(x.shape[3], out_w)
    rows = x[:, :, r0] * (1 - ty)[:, None] + x[:, :, r1] * ty[:, None]  # along H: (B, C, out_h, W)
    return (rows[..., c0] * (1 - tx) + rows[..., c1] * tx).astype(np.float32)  # then along W
    ### END SOLUTION


# %% tags=["check"]
check("bilinear")
### BEGIN HIDDEN TESTS
check("bilinear", hidden=True)
### END HIDDEN TESTS
