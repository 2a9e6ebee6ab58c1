# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: convolution as matrix multiplication (im2col) and Winograd F(2,3)
#
# **You will learn** to compute the output size of a convolution, to turn a convolution
# layer into one matrix multiplication by copying every receptive field into a column
# (im2col), to handle stride, padding, dilation and groups on the way, and to get two
# outputs of a 3-tap filter with 4 multiplications instead of 6 (Winograd's F(2,3)).
#
# A convolution layer takes $x$ of shape $(B, C, H, W)$ and filters $w$ of shape
# $(OC, C, k_h, k_w)$ and computes, for every image $b$, filter $o$ and output position $(i, j)$,
#
# $$\text{out}[b, o, i, j] = \sum_{c=0}^{C-1} \sum_{p=0}^{k_h-1} \sum_{q=0}^{k_w-1}
#   w[o, c, p, q]\; x_\text{pad}[b, c,\; i s_h + p d_h,\; j s_w + q d_w]$$
#
# where $x_\text{pad}$ is $x$ with $p_h$ rows of zeros above and below and $p_w$ columns left
# and right (the **padding**), $s$ is the **stride** (how far the window moves) and $d$ the
# **dilation** (how far apart its taps are). Deep-learning frameworks call this convolution,
# but it is a cross-correlation: the kernel is *not* flipped.
#
# Every output is a dot product of length $C k_h k_w$ between a filter and a patch of the
# input. Copy each patch into a column of a matrix (**im2col**, Chellapilla et al. 2006),
# and the whole layer is one GEMM: $W$ reshaped to $(OC, C k_h k_w)$ times the columns
# $(C k_h k_w, OH \cdot OW)$, which a GPU runs on its Tensor Cores.
#
# Write everything with numpy. Arguments `kernel_size`, `stride`, `padding` and
# `dilation` are pairs `(height, width)`. Results keep `x`'s dtype: integer inputs give
# exact integer results. The checks compare with PyTorch (`F.unfold`, `F.conv2d`); when
# grading, hidden checks run many more shapes, and `aisys.conv` (the reference) cannot
# be imported.

# %%
import numpy as np
from aisys_grader import checker

check = checker("03-tensor-cores/im2col", globals())

# %% [markdown]
# ## 1. Output size
#
# Along one axis, a kernel of $k$ taps with dilation $d$ spans $d(k-1)+1$ pixels. Windows
# start at $0, s, 2s, \dots$ of the padded input (size $n + 2p$), and a window that would
# run past its end is dropped:
#
# $$\text{out} = \left\lfloor \frac{n + 2p - d(k-1) - 1}{s} \right\rfloor + 1.$$
#
# For $n = 8$, $k = 3$, $s = 2$: windows start at 0, 2 and 4; one at 6 would need pixel 8.
# The checks use only sizes where at least one window fits.

# %% tags=["solution"]
def output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Number of output positions along one axis (PyTorch's Conv2d formula)."""
    ### BEGIN SOLUTION
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    ### END SOLUTION


# %% tags=["check"]
check("output_size")
### BEGIN HIDDEN TESTS
check("output_size", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. im2col
#
# Return the column matrix of shape $(B, C k_h k_w, OH \cdot OW)$ in the order of
# `torch.nn.functional.unfold`: row $c\,k_h k_w + p\,k_w + q$ holds tap $(p, q)$ of
# channel $c$, and column $i \cdot OW + j$ the window of output $(i, j)$. So
#
# $$\text{cols}[b,\; c k_h k_w + p k_w + q,\; i\,OW + j] = x_\text{pad}[b, c, i s_h + p d_h, j s_w + q d_w].$$
#
# `np.pad` pads; a loop over the $k_h k_w$ taps, each taking a strided slice of the padded
# input for all outputs at once, is both short and fast.

# %% tags=["solution"]
def im2col(x: np.ndarray, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Every receptive field of x (B, C, H, W) as a column: (B, C * kh * kw, OH * OW), unfold's order."""
    ### BEGIN SOLUTION
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    OH, OW = output_size(H, kh, sh, ph, dh), output_size(W, kw, sw, pw, dw)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    columns = np.empty((B, C, kh, kw, OH, OW), dtype=x.dtype)
    for p in range(kh):
        for q in range(kw):
            top, left = p * dh, q * dw
            columns[:, :, p, q] = padded[:, :, top:top + sh * (OH - 1) + 1:sh, left:left + sw * (OW - 1) + 1:sw]
    return columns.reshape(B, C * kh * kw, OH * OW)
    ### END SOLUTION


# %% tags=["check"]
check("im2col")
### BEGIN HIDDEN TESTS
check("im2col", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Convolution as GEMM
#
# With the columns, a convolution is $W (OC \times K) \,@\, \text{cols} (K \times OH \cdot OW)$
# per image, $K = C k_h k_w$, reshaped to $(B, OC, OH, OW)$. `w.reshape(OC, -1)` orders each
# filter's taps $(C, k_h, k_w)$, as im2col orders the rows.
#
# **Groups.** With `groups` $= G$, the channels split into $G$ groups: filters
# $g \cdot OC/G$ to $(g+1) \cdot OC/G - 1$ see only input channels $g \cdot C/G$ to
# $(g+1) \cdot C/G - 1$, and $w$ has shape $(OC, C/G, k_h, k_w)$. That is $G$ independent
# GEMMs of $(OC/G \times K) \,@\, (K \times OH \cdot OW)$ with $K = (C/G) k_h k_w$; since im2col
# orders rows by channel first, group $g$'s rows of the columns are $g K$ to $(g+1) K - 1$.
# Depthwise convolution (MobileNet) is $G = C$: one channel per group, a GEMM with $M = 1$.
#
# Use your `im2col` and matrix products (`@`), not a loop over output pixels, and not
# torch: the point is the GEMM.

# %% tags=["solution"]
def conv2d_gemm(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups: int) -> np.ndarray:
    """F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups) as one GEMM per group."""
    ### BEGIN SOLUTION
    B, C, H, W = x.shape
    OC, C_group, kh, kw = w.shape
    OH = output_size(H, kh, stride[0], padding[0], dilation[0])
    OW = output_size(W, kw, stride[1], padding[1], dilation[1])
    columns = im2col(x, (kh, kw), stride, padding, dilation)  # (B, C * kh * kw, OH * OW)
    M, K = OC // groups, C_group * kh * kw
    out = np.empty((B, OC, OH * OW), dtype=x.dtype)
    for g in range(groups):
        filters = w[g * M:(g + 1) * M].reshape(M, K)
        out[:, g * M:(g + 1) * M] = filters @ columns[:, g * K:(g + 1) * K]  # (M, K) @ (B, K, OH * OW)
    return out.reshape(B, OC, OH, OW)
    ### END SOLUTION


# %% tags=["check"]
check("conv2d_gemm")
### BEGIN HIDDEN TESTS
check("conv2d_gemm", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("conv2d_gemm_groups")
### BEGIN HIDDEN TESTS
check("conv2d_gemm_groups", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Winograd's F(2,3)
#
# Two outputs of a 3-tap filter $g$ over four inputs $d$,
# $y_0 = d_0 g_0 + d_1 g_1 + d_2 g_2$ and $y_1 = d_1 g_0 + d_2 g_1 + d_3 g_2$, take 6
# multiplications. Winograd's minimal filtering algorithm F(2,3) (Lavin and Gray,
# CVPR 2016) takes 4:
#
# $$y = A^T \big[(G g) \odot (B^T d)\big]$$
#
# with the matrices below ($\odot$ is the elementwise product: the 4 multiplications). $G g$
# depends only on the filter and is computed once per filter; $B^T d$ and $A^T$ need only
# additions (and $G$'s halves, which a network folds into the filter). Nested in two
# dimensions, F(2x2, 3x3) computes a 2x2 output tile from a 4x4 input tile $d$ with 16
# multiplications instead of 36:
#
# $$U = G g G^T, \quad V = B^T d B, \quad Y = A^T (U \odot V) A.$$
#
# Return a dict `{"products": ..., "y": ...}`: the elementwise products ($(G g) \odot (B^T d)$,
# shape (4,); in 2-D $U \odot V$, shape (4, 4)) and the outputs (shape (2,); in 2-D (2, 2)).
# The checks compare both, so they see your 4 (16) multiplications.

# %%
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)  # B^T, 4 x 4
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)  # 4 x 3
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)  # A^T, 2 x 4


# %% tags=["solution"]
def winograd_f23(d: np.ndarray, g: np.ndarray) -> dict:
    """F(2,3): the 4 products (G g) * (B^T d) and the 2 outputs of correlating d (4,) with g (3,)."""
    ### BEGIN SOLUTION
    products = (G @ g) * (BT @ d)
    return {"products": products, "y": AT @ products}
    ### END SOLUTION


# %% tags=["check"]
check("winograd_f23")
### BEGIN HIDDEN TESTS
check("winograd_f23", hidden=True)
### END HIDDEN TESTS

# %% tags=["solution"]
def winograd_f23_tile(d: np.ndarray, g: np.ndarray) -> dict:
    """F(2x2, 3x3): the 16 products U * V and the 2x2 outputs of correlating a 4x4 tile d with a 3x3 g."""
    ### BEGIN SOLUTION
    products = (G @ g @ G.T) * (BT @ d @ BT.T)
    return {"products": products, "y": AT @ products @ AT.T}
    ### END SOLUTION


# %% tags=["check"]
check("winograd_f23_tile")
### BEGIN HIDDEN TESTS
check("winograd_f23_tile", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. What im2col costs
#
# The column matrix stores each input pixel once per window that covers it: $k_h k_w$ times
# for stride 1 and "same" padding. With your functions, here are three convolution layers
# of ResNet-50 at batch 32 in bf16 (2 bytes per element): the GEMM each becomes, and the size
# of the column matrix against the input. Before running it, guess which layer's columns
# grow most. cuDNN's *implicit GEMM* never stores this matrix: it gathers tiles of it from
# the input as the GEMM needs them.

# %%
layers = {  # name: (B, C, H, W), (OC, kh, kw), stride, padding
    "conv1 7x7/2": ((32, 3, 224, 224), (64, 7, 7), 2, 3),
    "conv2_x 3x3": ((32, 64, 56, 56), (64, 3, 3), 1, 1),
    "conv5_x 1x1": ((32, 512, 7, 7), (2048, 1, 1), 1, 0),
}
for name, ((B, C, H, W), (OC, kh, kw), s, p) in layers.items():
    OH, OW = output_size(H, kh, s, p, 1), output_size(W, kw, s, p, 1)
    M, N, K = OC, B * OH * OW, C * kh * kw
    columns_mb, input_mb = K * N * 2 / 1e6, B * C * H * W * 2 / 1e6
    print(f"{name:12}  GEMM M={M:5} N={N:7} K={K:4}   columns {columns_mb:7.1f} MB = "
          f"{columns_mb / input_mb:5.2f} x the input ({input_mb:.1f} MB)")
