# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: INT8 GEMM with INT32 accumulation and requantization
#
# **You will learn** to multiply int8 matrices the way integer Tensor Cores do: products summed
# exactly in an int32 accumulator, the activation's zero point folded in as one correction term,
# and the result scaled back once per output element, to int8 codes (requantization) or to float32
# (a W8A8 linear layer's output), first in numpy, then fused into a Triton kernel's epilogue.
# An H100 runs int8 `wgmma` at twice its BF16 rate (NVIDIA H100 datasheet: 1,979 dense INT8 TOPS
# against 989 BF16 TFLOPS); the arithmetic below is what makes that speed give exact answers
# (Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
# Inference", CVPR 2018, sec. 2.2 and 2.3).
#
# **Layout.** A linear layer $y = x W^T$ is computed as $C = A B$: `a` is int8 of shape (M, K),
# one row per token; `b` is int8 of shape (K, N), one column per output channel. Every function
# takes numpy arrays (the Triton host function too) and returns a numpy array.
#
# **Conventions** (stated, because libraries differ on each):
#
# - `int8_matmul(a, b, a_zero_point=0)` returns $\sum_k (A_{mk} - z_m) B_{kn}$ **exactly**, as
#   **int32**. `a_zero_point` is an int or an int array of shape (M, 1) (one per token), in
#   [-128, 127]; the weights are symmetric (zero point 0). Every int8 product is at most
#   $128 \cdot 128 = 2^{14}$ in size, so K of them always fit int32 ($|s| \le 2^{31} - 1$) when
#   $K \le \lfloor (2^{31}-1) / 2^{14} \rfloor = 131071$; with a zero point, $|A - z| \le 255$ and
#   the bound is $\lfloor (2^{31}-1) / (255 \cdot 128) \rfloor = 65793$ (it applies when any zero
#   point is nonzero). A longer K raises `ValueError` (naming K and the limit).
# - `requantize(acc, a_scale, b_scale, out_scale, out_zero_point, bias=None)` returns int8 codes
#   $q = \mathrm{clamp}(\mathrm{round}((acc + bias) \cdot (s_a s_b) / s_{out}) + z_{out}, -128, 127)$
#   computed in **float64** in exactly that order: `acc + bias` (exact in float64), `a_scale * b_scale`
#   (exact: two float32s have 48 significant bits), times, divided by `out_scale`; then
#   **round half to even** (`np.round`), add `out_zero_point`, clamp to [-128, 127] (the full
#   int8 range), cast to int8. `a_scale` is float32, a scalar or (M, 1) (**per token**);
#   `b_scale` is float32, a scalar or (1, N) (**per output channel**); `out_scale` a float32
#   scalar; `out_zero_point` an int in [-128, 127]; `bias` int32 of shape (N,) in units of
#   $s_a s_b$ (as in gemmlowp and TFLite), or None.
# - `dequantize(acc, a_scale, b_scale, bias=None)` returns the layer's output in **float32**:
#   `acc.astype(float32) * a_scale * b_scale`, left to right in float32, plus `bias` (float32,
#   (N,)) if given. The checks allow a few float32 roundings of difference (rtol 1e-6).
# - `int8_gemm_kernel` (Triton) computes the same three results on a tile grid (section 4).
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers (`aisys.quant.int8_gemm`, `aisys.triton_kernels.int8_gemm`) cannot.

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_numpy  # noqa: F401  importing it bounds-checks the interpreter's loads and stores
from aisys_grader import checker

check = checker("08-quantization/int8_gemm", globals())

DEVICE = device.current()
print(device.describe())

# %% [markdown]
# ## 1. The exact int8 product
#
# Why int32: a sum of int8 products does not fit int8 (one product reaches $2^{14}$) nor int16 (two
# products of $-128 \cdot -128$ pass $2^{15}$); in float32 it is exact only while every partial
# sum stays below $2^{24}$, which 1,041 products of $127 \cdot 127$ pass. Multiply in int32 (cast
# the int8 codes up **before** multiplying: numpy multiplies int8 by int8 in int8, wrapping).
#
# The activation's zero point factors out of the sum (Jacob et al., sec. 2.3, eq. 7 with the
# weights' zero point 0):
# $\sum_k (A_{mk} - z_m) B_{kn} = \sum_k A_{mk} B_{kn} - z_m \sum_k B_{kn}$. The column sums of
# $B$ are computed once per weight, so the correction costs one multiply per output, not K.
# Subtracting $z$ from the codes first works too, if done in int32 (in int8, $127 - (-128)$ wraps).

# %% tags=["solution"]
INT32_MAX = 2**31 - 1


def int8_matmul(a, b, a_zero_point=0):
    """(a - a_zero_point) @ b exactly, as int32; ValueError for a K that int32 cannot hold."""
    ### BEGIN SOLUTION
    a, b = np.asarray(a), np.asarray(b)
    zp = np.asarray(a_zero_point, dtype=np.int32)
    K = a.shape[1]
    limit = INT32_MAX // ((255 if zp.any() else 128) * 128)
    if K > limit:
        raise ValueError(f"K = {K} is too long: int8 products sum exactly in int32 only for K <= {limit}")
    acc = a.astype(np.int32) @ b.astype(np.int32)
    column_sums = b.astype(np.int32).sum(axis=0, keepdims=True)
    return (acc - zp * column_sums).astype(np.int32)
    ### END SOLUTION


# %%
a = np.array([[127, -128, 3]], dtype=np.int8)
b = np.array([[127, 1], [-128, 1], [2, -1]], dtype=np.int8)
print(int8_matmul(a, b), int8_matmul(a, b).dtype)  # 127*127 + 128*128 + 6 = 32519, and 127 - 128 - 3 = -4
print(int8_matmul(a, b, a_zero_point=-128))  # (a + 128) @ b

# %% tags=["check"]
check("int8_matmul")
### BEGIN HIDDEN TESTS
check("int8_matmul", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("int8_matmul_long_k")
### BEGIN HIDDEN TESTS
check("int8_matmul_long_k", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Requantization: int32 back to int8
#
# The real value of an output is $s_a s_b \cdot acc$; its int8 code at the output's scale is that
# divided by $s_{out}$, rounded, shifted by the zero point and clamped. One multiplier
# $M = s_a s_b / s_{out}$ per output element: per token times per channel, an outer product, so
# `a_scale` (M, 1) broadcasts down the columns and `b_scale` (1, N) along the rows.
#
# Rounding is where implementations differ: $2.5$ rounds to $2$ half to even (what is asked here),
# to $3$ half away from zero (C's `round`, and the rounding shift of gemmlowp's fixed-point
# arithmetic, which integer-only hardware runs: the book's page shows it). Clamp **before** casting:
# `np.int8(200)` wraps to -56.

# %% tags=["solution"]
def requantize(acc, a_scale, b_scale, out_scale, out_zero_point, bias=None):
    """int8 codes clamp(round_half_even((acc + bias) * (a_scale * b_scale) / out_scale) + zero point)."""
    ### BEGIN SOLUTION
    total = np.asarray(acc).astype(np.float64)
    if bias is not None:
        total = total + np.asarray(bias).reshape(1, -1).astype(np.float64)
    scale = np.asarray(a_scale, dtype=np.float64) * np.asarray(b_scale, dtype=np.float64)
    codes = np.round(total * scale / np.float64(out_scale)) + out_zero_point
    return np.clip(codes, -128, 127).astype(np.int8)
    ### END SOLUTION


# %% tags=["solution"]
def dequantize(acc, a_scale, b_scale, bias=None):
    """The float32 output float32(acc) * a_scale * b_scale (+ bias): a W8A8 linear layer."""
    ### BEGIN SOLUTION
    out = np.asarray(acc).astype(np.float32) * np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)
    return out if bias is None else out + np.asarray(bias, np.float32).reshape(1, -1)
    ### END SOLUTION


# %%
acc = np.array([[5, -5, 7], [300, -300, 1]], dtype=np.int32)
a_scale = np.array([[0.5], [1.0]], dtype=np.float32)  # per token
b_scale = np.array([[1.0, 1.0, 0.25]], dtype=np.float32)  # per output channel
print(requantize(acc, a_scale, b_scale, np.float32(1.0), 0))  # 2.5 -> 2, -2.5 -> -2, 1.75 -> 2; 300 -> 127
print(dequantize(acc, a_scale, b_scale))

# %% tags=["check"]
check("requantize")
### BEGIN HIDDEN TESTS
check("requantize", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("dequantize")
### BEGIN HIDDEN TESTS
check("dequantize", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Why it matters: the error of a W8A8 layer
#
# A linear layer quantized per token (activations) and per channel (weights), multiplied exactly
# in int32 and dequantized, against the float64 product:

# %%
rng = np.random.default_rng(0)
x, w = rng.standard_normal((8, 256)), rng.standard_normal((64, 256)) * 0.05
x_scale = (np.abs(x).max(axis=1, keepdims=True) / 127).astype(np.float32)
w_scale = (np.abs(w).max(axis=1, keepdims=True) / 127).astype(np.float32)
xq = np.clip(np.round(x / x_scale), -127, 127).astype(np.int8)
wq = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
y = dequantize(int8_matmul(xq, wq.T), x_scale, w_scale.T)
print(f"relative error of the W8A8 output: {np.linalg.norm(y - x @ w.T) / np.linalg.norm(x @ w.T):.2%}")

# %% [markdown]
# ## 4. The Triton kernel
#
# Write `int8_gemm_kernel`: chapter 3's tiled GEMM (one program per `BLOCK_M x BLOCK_N` tile,
# grouped order given by `tile_of`, a loop over K with masked loads) with int8 inputs and an
# **int32** accumulator, `acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)` and
# `acc = tl.dot(a, b, acc, out_dtype=tl.int32)`, which Hopper runs as `wgmma ... .s32.s8.s8`.
# Mask every load on M, N **and K** (`other=0` adds nothing); on a CPU, a load past a tensor is an
# error. Then, while the tile is still in registers, the epilogue chosen by the constant `OUTPUT`:
#
# - `OUTPUT == 0`: store `acc` (int32);
# - `OUTPUT == 1`: requantize as in section 2, in float64: load the tile's `BLOCK_M` per-token
#   scales at `a_scale_ptr + offs_m` and `BLOCK_N` per-channel scales at `b_scale_ptr + offs_n`
#   (masked), add the int32 bias at `bias_ptr + offs_n` if `HAS_BIAS`, multiply by
#   `a_scale[:, None] * b_scale[None, :]` (both as float64), divide by `tl.load(out_scale_ptr)` (a
#   one-element float32 tensor) as float64, round with `round_half_even` (given: Triton has no
#   `np.round`), add `out_zero_point`, clamp to [-128, 127], store as int8;
# - `OUTPUT == 2`: store `acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]` (float32),
#   plus the float32 bias if `HAS_BIAS`.
#
# The host function `int8_gemm` (given) takes numpy arrays, makes the scales vectors of length M
# and N (a scalar is repeated), launches one program per tile and returns a numpy array of int32,
# int8 or float32. A fused epilogue never writes the int32 matrix to memory: 8 bytes per output
# saved (a write and a read of int32) over `torch._int_mm` followed by a scaling kernel.

# %%
@triton.jit
def tile_of(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program pid in grouped order (chapter 3's triton_gemm)."""
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_rows, (pid % per_group) // group_rows


@triton.jit
def round_half_even(x):
    """float64 x rounded to the nearest integer, ties to even (exact: x - floor(x) has no rounding error)."""
    below = tl.floor(x)
    fraction = x - below
    odd = (below - 2.0 * tl.floor(below * 0.5)) == 1.0
    return below + ((fraction > 0.5) | ((fraction == 0.5) & odd)).to(tl.float64)


# %% tags=["solution"]
@triton.jit
def int8_gemm_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr, out_zero_point,
                     M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One tile of C = A @ B: int8 inputs, an int32 accumulator, then OUTPUT's epilogue."""
    ### BEGIN SOLUTION
    pid_m, pid_n = tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    in_m, in_n = offs_m < M, offs_n < N
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if OUTPUT == 0:
        tl.store(c_ptrs, acc, mask=in_m[:, None] & in_n[None, :])
    else:
        a_scale = tl.load(a_scale_ptr + offs_m, mask=in_m, other=1.0)
        b_scale = tl.load(b_scale_ptr + offs_n, mask=in_n, other=1.0)
        if OUTPUT == 1:
            total = acc.to(tl.float64)
            if HAS_BIAS:
                total += tl.load(bias_ptr + offs_n, mask=in_n, other=0).to(tl.float64)[None, :]
            scale = a_scale.to(tl.float64)[:, None] * b_scale.to(tl.float64)[None, :]
            codes = round_half_even(total * scale / tl.load(out_scale_ptr).to(tl.float64)) + out_zero_point
            codes = tl.minimum(tl.maximum(codes, -128.0), 127.0)
            tl.store(c_ptrs, codes.to(tl.int8), mask=in_m[:, None] & in_n[None, :])
        else:
            out = acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]
            if HAS_BIAS:
                out += tl.load(bias_ptr + offs_n, mask=in_n, other=0.0)[None, :]
            tl.store(c_ptrs, out, mask=in_m[:, None] & in_n[None, :])
    ### END SOLUTION


# %%
OUTPUTS = {"int32": (0, torch.int32), "int8": (1, torch.int8), "float32": (2, torch.float32)}
CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2}  # small tiles: the interpreter is slow


def _on_device(x, dtype, length=None):
    """A numpy value as a contiguous tensor on DEVICE; with `length`, a vector of that length (a scalar repeated)."""
    t = torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=dtype)))
    if length is not None:
        t = t.reshape(-1).expand(length).contiguous()
    return t.to(DEVICE)


def int8_gemm(a, b, output="int32", a_scale=None, b_scale=None, out_scale=None, out_zero_point=0, bias=None):
    """C = a @ b with int8 a (M, K), b (K, N), summed in int32, as `output` ("int32", "int8" or "float32")."""
    M, K = a.shape
    N = b.shape[1]
    code, dtype = OUTPUTS[output]
    a_t, b_t = _on_device(a, np.int8), _on_device(b, np.int8)
    c = torch.empty((M, N), dtype=dtype, device=DEVICE)
    a_vec = _on_device(1.0 if a_scale is None else a_scale, np.float32, M)
    b_vec = _on_device(1.0 if b_scale is None else b_scale, np.float32, N)
    bias_vec = _on_device(0 if bias is None else bias, np.int32 if output == "int8" else np.float32, N)
    out_scale_t = _on_device([1.0 if out_scale is None else out_scale], np.float32)
    grid = (triton.cdiv(M, CONFIG["BLOCK_M"]) * triton.cdiv(N, CONFIG["BLOCK_N"]),)
    try:
        int8_gemm_kernel[grid](a_t, b_t, c, a_vec, b_vec, bias_vec, out_scale_t, int(out_zero_point), M, N, K,
                               a_t.stride(0), a_t.stride(1), b_t.stride(0), b_t.stride(1), c.stride(0), c.stride(1),
                               OUTPUT=code, HAS_BIAS=bias is not None, **CONFIG)
    except Exception as error:  # the interpreter wraps what the kernel raises: say plainly that it is not written
        if "NotImplementedError" in str(error):
            raise NotImplementedError("write int8_gemm_kernel first") from error
        raise
    return c.cpu().numpy()


# %%
a = np.random.default_rng(1).integers(-128, 128, (20, 100)).astype(np.int8)
b = np.random.default_rng(2).integers(-128, 128, (100, 30)).astype(np.int8)
got = int8_gemm(a, b)
print(got.dtype, np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)))

# %% tags=["check"]
check("triton_int8_gemm")
### BEGIN HIDDEN TESTS
check("triton_int8_gemm", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("triton_epilogue")
### BEGIN HIDDEN TESTS
check("triton_epilogue", hidden=True)
### END HIDDEN TESTS
