# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: INT4 packing and a dequantizing GEMV kernel
#
# **You will learn** how GPTQ and AWQ checkpoints store 4-bit weights (eight codes in one int32 word, in
# two nibble orders, with a scale and a zero point per group of inputs), why unpacking a word needs a
# mask after the shift, and how a W4A16 kernel multiplies fp16 activations by those weights while
# reading only the packed words, a quarter of the bytes of fp16 weights: at batch 1 a GEMV is bound
# by memory, so that is what makes it up to about 4 x faster (Frantar et al. 2022, GPTQ, section 5;
# Lin et al. 2023, AWQ, section 4).
#
# Conventions (the checks hold you to each):
#
# - **Codes** are unsigned, `q` in [0, 15] (GPTQ's and AWQ's convention; `08-quantization/affine`'s
#   signed 4-bit codes in [-8, 7] plus 8 are these, and so are their zero points plus 8).
# - **Weights** W are (N, K): N outputs, K inputs, `y = x @ W.T` as `torch.nn.Linear` stores them.
# - **Packing** is along K: 8 consecutive codes of a row make one **int32** word, so `pack(q, order)`
#   turns codes (N, K) into words (N, K // 8) of dtype int32. In `order="sequential"` (GPTQ) element
#   `j` of a word's 8 sits at bits `4j .. 4j + 3`. In `order="awq"` the nibble at bits `4i` holds element
#   `AWQ_ORDER[i]`, `AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]` (AutoAWQ's `order_map`): element `j` sits at
#   nibble `j // 2 + 4 * (j % 2)`, so elements 0 and 1 sit at bits 0 and 16, 2 and 3 at bits 4 and 20.
# - A code >= 8 in the top nibble (bits 28..31) sets the **sign bit**: the word is a negative int32
#   (all codes 15 make the word -1). Build the word so that it wraps like that, never raising an
#   overflow and never saturating.
# - `unpack(packed, order)` is the inverse: int32 words (N, K // 8) to codes (N, K) of dtype **uint8**.
#   Shifting an int32 right is arithmetic (it fills with copies of the sign bit): mask with `0xF` after
#   the shift.
# - `pack` raises **ValueError** when K (the last dimension of `q`) is not a multiple of 8, with a
#   message that names `K`, and when a code lies outside [0, 15], with a message that names `q`. The
#   checks give `q` as a 2-D integer array (int64).
# - **Groups**: one fp16 scale `s` and one zero point `z` (an integer in [0, 15], stored as uint8) per
#   `G` consecutive inputs of a row: scales and zeros are (N, K // G), G a multiple of 8 that divides K,
#   `GROUP_SIZE = K // scales.shape[1]`. Input `k` of row `n` belongs to group `k // G`, and
#   `W[n, k] = (q[n, k] - z[n, k // G]) * s[n, k // G]`: the zero point subtracted from the code first
#   (in integers), then scaled, as AWQ's and GPTQ's kernels do.
# - **The kernel** (Triton) computes `y = x @ W.T` for x (M, K) with M from 1 to 16, reading the packed
#   words, scales and zeros, unpacking in registers and accumulating in float32; y is (M, N) in x's dtype.
#   It must read each packed word **once** (a check counts the elements its loads read from `w_ptr`): no
#   dequantized copy of W, no load of a word per nibble.
# - The GEMV is compared with `x @ W.T` in float64 (x as sent, W dequantized exactly) within
#   `(K + 2) * 2**-24 * max_n sum_k |x[m, k] W[n, k]|` (the bound on float32 rounding of a K-term sum),
#   plus half a unit in the last place of the result when y is float16.
#
# On a CPU the kernel runs in Triton's interpreter, with tiles of 16 rows by 64 inputs. When grading,
# the references `aisys.quant.int4` and `aisys.triton_kernels.int4_gemv` cannot be imported.

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("08-quantization/int4_gemv", globals())

DEVICE = device.current()
print(device.describe())
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

# %% [markdown]
# ## 1. Packing eight codes into a word
#
# Write `pack` and `unpack` in numpy for both orders. A word is 32 bits: compute it in a wider
# unsigned type (or in int64) and reinterpret the low 32 bits as int32 (`.astype(np.uint32).view(np.int32)`),
# or shift int32 values and let bit 31 become the sign.

# %% tags=["solution"]
def nibble_positions(order: str) -> np.ndarray:
    """The nibble (bits 4p .. 4p + 3) where element j of a word's 8 sits, for j = 0..7."""
    ### BEGIN SOLUTION
    if order == "awq":
        return np.array([j // 2 + 4 * (j % 2) for j in range(8)])
    return np.arange(8)
    ### END SOLUTION


def pack(q, order: str = "sequential") -> np.ndarray:
    """Codes q (N, K) in [0, 15] to int32 words (N, K // 8), 8 codes per word along K, in `order`."""
    ### BEGIN SOLUTION
    q = np.asarray(q)
    if q.shape[-1] % 8:
        raise ValueError(f"K (the last dimension of q) must be a multiple of 8, got K = {q.shape[-1]}")
    if q.size and (q.min() < 0 or q.max() > 15):
        raise ValueError(f"q must hold codes in [0, 15], got values in [{q.min()}, {q.max()}]")
    shifts = 4 * nibble_positions(order)
    groups = q.astype(np.uint32).reshape(*q.shape[:-1], -1, 8)
    words = np.zeros(groups.shape[:-1], dtype=np.uint32)
    for j in range(8):
        words |= groups[..., j] << np.uint32(shifts[j])
    return words.view(np.int32)
    ### END SOLUTION


def unpack(packed, order: str = "sequential") -> np.ndarray:
    """int32 words (N, K // 8) back to codes (N, K) uint8 in [0, 15]."""
    ### BEGIN SOLUTION
    packed = np.asarray(packed, dtype=np.int32)
    shifts = 4 * nibble_positions(order)
    codes = (packed[..., None] >> shifts) & 0xF  # mask after the shift: it is arithmetic
    return codes.reshape(*packed.shape[:-1], -1).astype(np.uint8)
    ### END SOLUTION


# %% [markdown]
# `pack_error` (provided) is how the grader reads what `pack` raises:

# %%
def pack_error(q, order):
    """[the exception's type, its message] that pack(q, order) raises, or None if it returns."""
    try:
        pack(q, order)
    except NotImplementedError:  # not written yet: the grader says so
        raise
    except Exception as error:
        return [type(error).__name__, str(error)]
    return None


q = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 15]])
for order in ("sequential", "awq"):
    words = pack(q, order)
    print(order, [f"{int(w) & 0xFFFFFFFF:#010x}" for w in words[0]], words.dtype, unpack(words, order)[0])

# %% tags=["check"]
check("pack_rejects")
### BEGIN HIDDEN TESTS
check("pack_rejects", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("pack_words")
### BEGIN HIDDEN TESTS
check("pack_words", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("unpack_words")
### BEGIN HIDDEN TESTS
check("unpack_words", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The W4A16 kernel
#
# Program `pid` computes outputs `n = pid * BLOCK_N + arange(BLOCK_N)` (mask `n < N`) for all M rows of
# x (`BLOCK_M` is M rounded up to a power of 2; mask `m < M`). It walks K in tiles of `BLOCK_K` inputs
# (`BLOCK_K // 8` words per row; mask the last, partial tile) and for each tile:
#
# 1. loads the (BLOCK_N, BLOCK_K // 8) words of the tile **once** (word `w` of row `n` is at
#    `w_ptr + n * (K // 8) + w`), and broadcasts each to its 8 codes: `tl.broadcast_to(words[:, :, None],
#    (BLOCK_N, BLOCK_K // 8, 8))` reshaped with `tl.reshape` to (BLOCK_N, BLOCK_K), so that column `k`
#    holds the word of input `k0 + k`;
# 2. shifts right by 4 x the nibble of element `k % 8` (which depends on `AWQ`) and masks with `0xF`;
# 3. loads the scale and zero of each input's group (`s_ptr + n * (K // GROUP_SIZE) + k // GROUP_SIZE`,
#    the same for `z_ptr`) and dequantizes `w = (q - z) * s` in float32;
# 4. loads x's tile (row `m` at `x_ptr + m * stride_xm + k`) in float32 and adds
#    `sum_k x[m, k] * w[n, k]` to a float32 accumulator (BLOCK_M, BLOCK_N).
#
# Then it stores the accumulator in y's dtype at `y_ptr + m * stride_ym + n`.

# %% tags=["solution"]
@triton.jit
def w4a16_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                      GROUP_SIZE: tl.constexpr, AWQ: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    """Rows [pid * BLOCK_N, + BLOCK_N) of y (M, N) = x (M, K) @ W.T, W from packed (N, K // 8) int32 words."""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_w = tl.arange(0, BLOCK_K // 8)
    rows_in = offs_n < N
    j = offs_k % 8
    if AWQ:
        shifts = (j // 2 + (j % 2) * 4) * 4
    else:
        shifts = j * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_in = k < K
        word = k0 // 8 + offs_w
        words = tl.load(w_ptr + offs_n[:, None] * (K // 8) + word[None, :],
                        mask=rows_in[:, None] & (word < K // 8)[None, :], other=0)
        words = tl.reshape(tl.broadcast_to(words[:, :, None], (BLOCK_N, BLOCK_K // 8, 8)), (BLOCK_N, BLOCK_K))
        q = (words >> shifts[None, :]) & 0xF
        tile_in = rows_in[:, None] & k_in[None, :]
        group = offs_n[:, None] * (K // GROUP_SIZE) + (k // GROUP_SIZE)[None, :]
        s = tl.load(s_ptr + group, mask=tile_in, other=0.0).to(tl.float32)
        z = tl.load(z_ptr + group, mask=tile_in, other=0).to(tl.int32)
        w = (q - z).to(tl.float32) * s
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=(offs_m < M)[:, None] & k_in[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(offs_m < M)[:, None] & rows_in[None, :])
    ### END SOLUTION


# %% [markdown]
# ## The launcher (provided)
#
# `w4a16_gemv(x, packed, scales, zeros, order, dtype)` takes numpy arrays: x (M, K) holding `dtype`
# data ("fp32" or "fp16"), packed (N, K // 8) int32, scales (N, K // G) float16, zeros (N, K // G)
# uint8, and returns y (M, N) in `dtype`.

# %%
BLOCK_N, BLOCK_K = 16, 64


def w4a16_gemv(x, packed, scales, zeros, order, dtype):
    """y = x @ W.T, W the dequantized 4-bit weights, through one launch of w4a16_gemv_kernel."""
    x = to_device(x, dtype)
    packed = torch.from_numpy(np.ascontiguousarray(packed, dtype=np.int32)).to(DEVICE)
    scales = torch.from_numpy(np.ascontiguousarray(scales, dtype=np.float16)).to(DEVICE)
    zeros = torch.from_numpy(np.ascontiguousarray(zeros, dtype=np.uint8)).to(DEVICE)
    M, K = x.shape
    N = packed.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, BLOCK_N),)
    try:
        w4a16_gemv_kernel[grid](x, packed, scales, zeros, y, M, N, K, x.stride(0), y.stride(0),
                                GROUP_SIZE=K // scales.shape[1], AWQ=order == "awq",
                                BLOCK_M=triton.next_power_of_2(M), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    except Exception as error:  # Triton wraps what the kernel raises: say plainly that the kernel is still empty
        if "NotImplementedError" in str(error):
            raise NotImplementedError("w4a16_gemv_kernel is not written yet") from error
        raise
    return to_numpy(y)


# %% [markdown]
# Compare with numpy on 40 outputs (two full tiles of rows and a partial one) and K = 96 (one full
# tile of inputs and a partial one), groups of 32:

# %%
rng = np.random.default_rng(0)
N, K, G = 40, 96, 32
q = rng.integers(0, 16, (N, K))
scales = (rng.uniform(0.01, 0.1, (N, K // G))).astype(np.float16)
zeros = rng.integers(0, 16, (N, K // G)).astype(np.uint8)
x = rng.standard_normal((2, K)).astype(np.float32)
W = (q - np.repeat(zeros, G, axis=1).astype(np.int64)) * np.repeat(scales, G, axis=1).astype(np.float64)
for order in ("sequential", "awq"):
    y = w4a16_gemv(x, pack(q, order), scales, zeros, order, "fp32")
    print(order, np.abs(y - x @ W.T).max())

# %% tags=["check"]
check("gemv")
### BEGIN HIDDEN TESTS
check("gemv", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("gemv_awq")
### BEGIN HIDDEN TESTS
check("gemv_awq", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What makes it a W4A16 kernel is what it reads: the grader runs `w4a16_gemv` again in Triton's
# interpreter and counts the elements the kernel's loads read from `w_ptr`. Each packed word must be
# read once: N x K / 8 elements, an eighth of the codes. On a GPU that is the whole saving; loading
# the word again for each of its 8 nibbles issues 8 x the loads (the cache may absorb the bytes, not the
# instructions), and a dequantized fp16 copy reads 4 x the bytes.

# %% tags=["check"]
check("gemv_reads_packed")
### BEGIN HIDDEN TESTS
check("gemv_reads_packed", hidden=True)
### END HIDDEN TESTS
