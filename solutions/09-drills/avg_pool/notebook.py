# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: 2-D average pooling
#
# **You will learn** to write 2-D average pooling over a batch of images with a kernel, a stride and
# padding, and to get the two details interviewers probe right: the output size, and what a window that
# overlaps the padding divides by.
#
# **The conventions, all of them:**
# - `avg_pool2d(x, kernel_size, stride=None, padding=0)`: `x` is a float32 array of shape `(B, C, H, W)`
#   (NCHW); `kernel_size`, `stride` and `padding` are ints, the same along H and W; `stride=None` means
#   `stride = kernel_size` (PyTorch's default);
# - the image is padded with `padding` pixels on each of its four sides, `0 <= padding <= kernel_size // 2`
#   (PyTorch's limit); output `(i, j)` covers rows `i * stride - padding ... i * stride - padding +
#   kernel_size - 1` of the image, and the same for columns;
# - the output size is `OH = floor((H + 2 * padding - kernel_size) / stride) + 1` (`ceil_mode=False`: a
#   window that would run past the padded image is dropped), and the same for `OW`; the inputs always
#   give `OH, OW >= 1`;
# - **`count_include_pad=False`**: each output is the mean of the pixels *of the image* its window
#   covers; padded positions are neither added nor counted (PyTorch's default is `True`; here it is
#   `False`). Pixels of the image that are 0 do count. As `padding <= kernel_size // 2`, every window
#   covers at least one pixel;
# - the result is a float32 array of shape `(B, C, OH, OW)`, compared with a relative tolerance of 1e-5
#   and an absolute one of 1e-5 (adding in float32 or in float64 both pass).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/avg_pool", globals())

# %% tags=["solution"]
def avg_pool2d(x, kernel_size, stride=None, padding=0) -> np.ndarray:
    """Average pooling of x (B, C, H, W), padding not counted: float32 (B, C, OH, OW)."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    k, p = kernel_size, padding
    s = kernel_size if stride is None else stride
    B, C, H, W = x.shape
    OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    inside = np.pad(np.ones((H, W)), p)  # 1 on the image, 0 on the padding
    total, count = np.zeros((B, C, OH, OW)), np.zeros((OH, OW))
    for dy in range(k):  # tap (dy, dx) of every window at once: a strided slice
        for dx in range(k):
            rows, cols = slice(dy, dy + s * (OH - 1) + 1, s), slice(dx, dx + s * (OW - 1) + 1, s)
            total += padded[:, :, rows, cols]
            count += inside[rows, cols]
    return (total / count).astype(np.float32)
    ### END SOLUTION


# %% tags=["check"]
check("avg_pool")
### BEGIN HIDDEN TESTS
check("avg_pool", hidden=True)
### END HIDDEN TESTS
