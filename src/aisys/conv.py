"""Convolution as matrix multiplication: im2col, one GEMM per group, and Winograd's minimal filtering F(m, r).

A 2-D convolution layer (cross-correlation, as in every deep-learning
framework: the kernel is not flipped) computes, for x of shape (B, C, H, W)
and w of shape (OC, C / groups, kh, kw),

    out[b, o, i, j] = sum_{c, p, q} w[o, c, p, q] * x[b, c', i * s + p * d - pad, j * s + q * d - pad]

with c' the channel c of o's group, zero outside the image. **im2col**
(Chellapilla, Puri and Simard, 2006) copies every receptive field into a
column, so that the whole layer becomes one GEMM per group:

    out (M x N) = W (M x K) @ columns (K x N),  M = OC / groups, K = C / groups * kh * kw, N = B * OH * OW.

The column matrix holds each input pixel up to kh * kw times (exactly that
many for stride 1 and "same" padding): `im2col_expansion`. cuDNN's implicit
GEMM (Chetlur et al., 2014) runs the same GEMM without storing it, gathering
tiles of the columns from x on the fly.

**Winograd** (Lavin and Gray, CVPR 2016) computes m outputs of an r-tap filter
with m + r - 1 multiplications instead of m * r: y = A^T [(G g) * (B^T d)].
Nested in 2-D, F(2x2, 3x3) needs 16 instead of 36. The transforms have
fractional entries that grow with the tile, so larger tiles lose accuracy in
low precision (Barabasz et al., ACM TOMS 2020).
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._validate import nonnegative_int, positive_int
from .dtypes import bytes_per_element
from .roofline import Cost

# ---------------------------------------------------------------------------------------------------------------
# Sizes and arguments


def _pair(name: str, value, check) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each validated by `check`."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise TypeError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")
        return check(f"{name}[0]", value[0]), check(f"{name}[1]", value[1])
    return (check(name, value),) * 2


def _output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, axis: str) -> int:
    span = dilation * (kernel - 1) + 1  # pixels one window covers
    padded = size + 2 * padding
    if span > padded:
        raise ValueError(f"the kernel{axis} spans {span} pixels (kernel {kernel}, dilation {dilation}) but the padded "
                         f"input has only {padded} ({size} + 2 x padding {padding}): no output position fits")
    return (padded - span) // stride + 1


def output_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Output positions along one axis: floor((size + 2 padding - dilation (kernel - 1) - 1) / stride) + 1.

    The floor drops a last window that would run past the padded input (PyTorch's Conv2d formula).
    """
    return _output_size(positive_int("size", size), positive_int("kernel", kernel), positive_int("stride", stride),
                        nonnegative_int("padding", padding), positive_int("dilation", dilation), "")


def _geometry(H: int, W: int, kernel_size, stride, padding, dilation):
    """Validated (kh, kw), (sh, sw), (ph, pw), (dh, dw) and the output size (OH, OW)."""
    k = _pair("kernel_size", kernel_size, positive_int)
    s = _pair("stride", stride, positive_int)
    p = _pair("padding", padding, nonnegative_int)
    d = _pair("dilation", dilation, positive_int)
    out = (_output_size(H, k[0], s[0], p[0], d[0], " (kernel_size, along H)"),
           _output_size(W, k[1], s[1], p[1], d[1], " (kernel_size, along W)"))
    return k, s, p, d, out


def _image(name: str, value) -> np.ndarray:
    """A 4-D array of integers or floats."""
    array = np.asarray(value)
    if array.ndim != 4:
        raise ValueError(f"{name} must be a 4-D array, got shape {array.shape}")
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integers or floats, got dtype {array.dtype}")
    return array


def _shape4(name: str, shape) -> tuple[int, int, int, int]:
    if not (isinstance(shape, (tuple, list)) and len(shape) == 4):
        raise ValueError(f"{name} must be a 4-D shape, got {shape!r}")
    return tuple(positive_int(f"{name}[{i}]", n) for i, n in enumerate(shape))


# ---------------------------------------------------------------------------------------------------------------
# im2col and convolution as GEMM


def im2col(x, kernel_size, stride=1, padding=0, dilation=1) -> np.ndarray:
    """The column matrix of x (B, C, H, W): (B, C * kh * kw, OH * OW), in torch.nn.functional.unfold's order.

    Row c * kh * kw + p * kw + q holds tap (p, q) of channel c; column i * OW + j the window of output (i, j).
    kernel_size, stride, padding and dilation are ints or (height, width) pairs.
    """
    x = _image("x", x)
    B, C, H, W = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (OH, OW) = _geometry(H, W, kernel_size, stride, padding, dilation)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    columns = np.empty((B, C, kh, kw, OH, OW), dtype=x.dtype)
    for p in range(kh):  # tap (p, q) of every window is a strided slice of the padded input
        for q in range(kw):
            top, left = p * dh, q * dw
            columns[:, :, p, q] = padded[:, :, top:top + sh * (OH - 1) + 1:sh, left:left + sw * (OW - 1) + 1:sw]
    return columns.reshape(B, C * kh * kw, OH * OW)


def im2col_expansion(height: int, width: int, kernel_size, stride=1, padding=0, dilation=1) -> float:
    """How many times larger the column matrix is than the input: kh kw OH OW / (H W).

    Exactly kh * kw for stride 1 and "same" padding (OH = H, OW = W): 9 for a 3x3 kernel.
    """
    H, W = positive_int("height", height), positive_int("width", width)
    (kh, kw), _, _, _, (OH, OW) = _geometry(H, W, kernel_size, stride, padding, dilation)
    return kh * kw * OH * OW / (H * W)


@dataclass(frozen=True)
class GemmShape:
    """The GEMMs a convolution runs: `count` (= groups) of W (M x K) @ columns (K x N).

    cuDNN and CUTLASS name them the other way round (GEMM-M = B * OH * OW, GEMM-N = OC); the work is the same.
    """

    M: int  # output channels per group
    N: int  # output pixels of the whole batch, B * OH * OW
    K: int  # taps per output: C / groups * kh * kw
    count: int  # one GEMM per group

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K * self.count


def gemm_shape(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> GemmShape:
    """The GEMM shape (M, N, K, count) of a convolution of x (B, C, H, W) with w (OC, C / groups, kh, kw)."""
    B, C, H, W = _shape4("x_shape", x_shape)
    OC, C_group, kh, kw = _shape4("w_shape", w_shape)
    groups = positive_int("groups", groups)
    if C % groups:
        raise ValueError(f"groups ({groups}) must divide x's channels C = {C}")
    if OC % groups:
        raise ValueError(f"groups ({groups}) must divide w's output channels OC = {OC}")
    if C_group * groups != C:
        raise ValueError(f"w has {C_group} input channels per filter, but x has C = {C} channels in {groups} "
                         f"group(s): expected w.shape[1] == C / groups = {C // groups}")
    _, _, _, _, (OH, OW) = _geometry(H, W, (kh, kw), stride, padding, dilation)
    return GemmShape(M=OC // groups, N=B * OH * OW, K=C_group * kh * kw, count=groups)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """torch.nn.functional.conv2d computed as one GEMM per group over im2col's columns: (B, OC, OH, OW).

    Integer inputs give exact integer results; the result has x's dtype.
    """
    x, w = _image("x", x), _image("w", w)
    if w.dtype != x.dtype:
        raise TypeError(f"w has dtype {w.dtype} but x has {x.dtype}: cast one to the other (torch requires it too)")
    shape = gemm_shape(x.shape, w.shape, stride, padding, dilation, groups)
    (B, _, H, W), (OC, _, kh, kw) = x.shape, w.shape
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (OC,) or bias.dtype != x.dtype:
            raise ValueError(f"bias must have shape ({OC},) and dtype {x.dtype}, got {bias.shape} {bias.dtype}")
    OH, OW = _geometry(H, W, (kh, kw), stride, padding, dilation)[4]
    columns = im2col(x, (kh, kw), stride, padding, dilation)  # (B, C * kh * kw, OH * OW)
    # Fold the batch into N: one GEMM of N = B * OH * OW per group instead of B small ones.
    columns = columns.transpose(1, 0, 2).reshape(groups * shape.K, shape.N)
    weights = w.reshape(groups, shape.M, shape.K)
    out = np.empty((OC, shape.N), dtype=x.dtype)
    for g in range(groups):  # group g: output channels g*M.., rows g*K.. of the columns (channels g*C/groups..)
        out[g * shape.M:(g + 1) * shape.M] = weights[g] @ columns[g * shape.K:(g + 1) * shape.K]
    if bias is not None:
        out += bias[:, None]
    return np.ascontiguousarray(out.reshape(OC, B, OH, OW).transpose(1, 0, 2, 3))


def conv2d_cost(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, dtype: str = "bf16") -> Cost:
    """FLOPs and minimum traffic of a convolution: x and w read once, the output written once.

    This is what an implicit GEMM can approach; an explicit im2col GEMM reads the K x N column matrix
    instead of x (see `roofline.gemm(M, N, K)`), and must write it first.
    """
    shape = gemm_shape(x_shape, w_shape, stride, padding, dilation, groups)
    elements = math.prod(x_shape) + math.prod(w_shape) + w_shape[0] * shape.N  # the output: OC * B * OH * OW
    return Cost(flops=shape.flops, bytes=elements * bytes_per_element(dtype))


# ---------------------------------------------------------------------------------------------------------------
# Winograd's minimal filtering

# F(2, 3) as printed in Lavin and Gray (2016), eq. (4)-(5): y = A^T [(G g) * (B^T d)] for a 4-sample input d
# and a 3-tap filter g gives y0 = d0 g0 + d1 g1 + d2 g2 and y1 = d1 g0 + d2 g1 + d3 g2 with 4 multiplications.
F23_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
F23_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
F23_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)

# Interpolation points for larger tiles, in the order Lavin's wincnn takes them; infinity is always the last point.
POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2), 3, -3, Fraction(1, 3), Fraction(-1, 3))


def direct_multiplications(m: int, r: int, dims: int = 1) -> int:
    """Multiplications of m outputs (m x m in 2-D) of an r-tap (r x r) filter computed directly: (m r)^dims."""
    return (positive_int("m", m) * positive_int("r", r)) ** positive_int("dims", dims)


def winograd_multiplications(m: int, r: int, dims: int = 1) -> int:
    """Multiplications of Winograd's F(m, r) (nested in `dims` dimensions): (m + r - 1)^dims, the minimum."""
    return (positive_int("m", m) + positive_int("r", r) - 1) ** positive_int("dims", dims)


def _vector(name: str, value, length: int) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != (length,) or array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a vector of {length} numbers, got shape {array.shape} dtype {array.dtype}")
    return array


def winograd_f23(d, g) -> np.ndarray:
    """Two outputs of the 3-tap correlation of d (4,) with g (3,), with 4 multiplications instead of 6."""
    d, g = _vector("d", d, 4), _vector("g", g, 3)
    return F23_AT @ ((F23_G @ g) * (F23_BT @ d))  # the 4 products: (G g) * (B^T d)


def winograd_f23_tile(d, g) -> np.ndarray:
    """The 2x2 outputs of a 4x4 input tile d correlated with a 3x3 filter g: F(2x2, 3x3), 16 multiplications."""
    d, g = np.asarray(d), np.asarray(g)
    if d.shape != (4, 4) or g.shape != (3, 3) or d.dtype.kind not in "iuf" or g.dtype.kind not in "iuf":
        raise ValueError(f"d must be a 4x4 and g a 3x3 array of numbers, got shapes {d.shape} and {g.shape}")
    U = F23_G @ g @ F23_G.T  # (4, 4) transformed filter
    V = F23_BT @ d @ F23_BT.T  # (4, 4) transformed input tile
    return F23_AT @ (U * V) @ F23_AT.T


def _polynomial(roots) -> list[Fraction]:
    """Coefficients (lowest degree first) of prod (x - root)."""
    coefficients = [Fraction(1)]
    for root in roots:
        shifted = [Fraction(0)] + coefficients  # x * poly
        coefficients = [a - root * b for a, b in zip(shifted, coefficients + [Fraction(0)])]
    return coefficients


def winograd_matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T, G, B^T) of F(m, r), shapes (m, n), (n, r), (n, n) with n = m + r - 1: y = A^T [(G g) * (B^T d)].

    F(2, 3) gives Lavin and Gray's matrices. Otherwise the Toom-Cook construction: linear convolution of an
    m-term and an r-term polynomial by evaluation at n - 1 points of POINTS and at infinity, then Lagrange
    interpolation; its transpose is the correlation F(m, r). Lagrange's denominators go into G (as in wincnn),
    so B^T keeps integer entries. Exact in fractions, returned as float64.
    """
    m, r = positive_int("m", m), positive_int("r", r)
    if (m, r) == (2, 3):
        return F23_AT.copy(), F23_G.copy(), F23_BT.copy()
    n = m + r - 1
    if n - 1 > len(POINTS):
        raise ValueError(f"F({m}, {r}) needs {n - 1} finite points; at most {len(POINTS)} are defined (m + r <= "
                         f"{len(POINTS) + 2})")
    points = [Fraction(p) for p in POINTS[:n - 1]]

    def evaluate(terms):  # values at each point, and at infinity the leading coefficient
        return [[p**k for k in range(terms)] for p in points] + [[Fraction(0)] * (terms - 1) + [Fraction(1)]]

    G = evaluate(r)
    B_transposed = []  # row i: the interpolation polynomial of point i (coefficients), the transposed A' matrix
    for i, p in enumerate(points):
        others = points[:i] + points[i + 1:]
        B_transposed.append(_polynomial(others) + [Fraction(0)])
        G[i] = [value / math.prod(p - q for q in others) for value in G[i]]
    B_transposed.append(_polynomial(points))  # infinity: y = y_inf * prod(x - p) + (interpolant of the rest)
    A_transposed = np.array(evaluate(m), dtype=object).T
    return tuple(np.array(rows, dtype=object).astype(np.float64) for rows in (A_transposed, G, B_transposed))


def winograd_conv2d(x, w, padding=0, m: int = 2) -> np.ndarray:
    """conv2d(x, w, padding=padding) for stride 1, with F(m x m, r x r) on every m x m output tile.

    x (B, C, H, W) and w (OC, C, r, r) are floats; every stage runs in x's dtype, so float16 data shows
    float16's error. The work is (m + r - 1)^2 GEMMs of (OC x C) @ (C x B * tiles), one per point of the
    transformed tile (Lavin and Gray, section 4), between the input, filter and output transforms.
    """
    x, w = _image("x", x), _image("w", w)
    if x.dtype.kind != "f" or w.dtype != x.dtype:
        raise TypeError(f"x and w must be floats of one dtype (Winograd's transforms hold fractions), got "
                        f"{x.dtype} and {w.dtype}")
    B, C, H, W = x.shape
    OC, C_w, r, r_w = w.shape
    if r != r_w:
        raise ValueError(f"w must hold square filters (OC, C, r, r) for F(m x m, r x r), got shape {w.shape}")
    if C_w != C:
        raise ValueError(f"w has {C_w} input channels but x has C = {C}: expected w.shape[1] == {C}")
    padding, m = nonnegative_int("padding", padding), positive_int("m", m)
    OH = _output_size(H, r, 1, padding, 1, " (w, along H)")
    OW = _output_size(W, r, 1, padding, 1, " (w, along W)")
    AT, G, BT = (matrix.astype(x.dtype) for matrix in winograd_matrices(m, r))
    n = m + r - 1
    tiles_h, tiles_w = -(-OH // m), -(-OW // m)
    # Pad the bottom and right so that the last tiles are whole; their extra outputs are cut off at the end.
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding + tiles_h * m - OH), (padding, padding + tiles_w * m - OW)))
    d = np.lib.stride_tricks.sliding_window_view(padded, (n, n), axis=(2, 3))[:, :, ::m, ::m]  # (B, C, th, tw, n, n)
    V = BT @ d @ BT.T  # input transform, (B, C, th, tw, n, n)
    U = G @ w @ G.T  # filter transform, (OC, C, n, n)
    P = B * tiles_h * tiles_w
    V = V.transpose(4, 5, 1, 0, 2, 3).reshape(n * n, C, P)
    U = U.transpose(2, 3, 0, 1).reshape(n * n, OC, C)
    products = (U @ V).reshape(n, n, OC, B, tiles_h, tiles_w)  # n^2 GEMMs: (OC x C) @ (C x P)
    Y = AT @ products.transpose(3, 2, 4, 5, 0, 1) @ AT.T  # output transform, (B, OC, th, tw, m, m)
    Y = Y.transpose(0, 1, 2, 4, 3, 5).reshape(B, OC, tiles_h * m, tiles_w * m)
    return np.ascontiguousarray(Y[:, :, :OH, :OW])
