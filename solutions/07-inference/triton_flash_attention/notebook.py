# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the FlashAttention forward kernel in Triton
#
# **You will learn** how FlashAttention-2's forward pass maps onto a GPU: one program per block
# of queries and (batch, head), the query tile held in registers while key and value blocks
# stream past, two `tl.dot`s per block on the Tensor Cores, the online softmax in float32 with
# base-2 exponentials, and a causal loop that stops at the diagonal.
#
# You wrote the algorithm in numpy in `07-inference/flash_attention`. Here a program owns
# `BLOCK_M` query rows of one (batch, head) pair and keeps, per row, the running max `m_i`,
# the running sum `l_i` and the float32 accumulator `acc` (`BLOCK_M` x `HEAD_DIM`). For each
# block of `BLOCK_N` keys it:
#
# 1. loads `k` as a (`HEAD_DIM`, `BLOCK_N`) tile (the transpose, by swapping the offsets) and `v`
#    as (`BLOCK_N`, `HEAD_DIM`), both masked past `T_K` with `other=0.0`;
# 2. computes the scores `s = tl.dot(q, k, input_precision=PRECISION) * scale_log2`. `PRECISION`
#    is "ieee" for float32 inputs: on a GPU, `tl.dot` of float32 otherwise runs in TF32, whose
#    10-bit mantissa errs by about 1e-3 (and by whole units on scores near 1000). The launcher passes
#    `scale_log2 = log2(e) / sqrt(hs)`, so `s` is in **base-2 units**: $e^{x} = 2^{x \log_2 e}$,
#    and `tl.exp2` is the GPU's native exponential (one `MUFU.EX2` instruction);
# 3. sets to `-inf` the scores of keys past `T_K`, and when causal those of keys after the query:
#    query row `r` sits at position `T_K - T_Q + r` (bottom-right, as in the numpy exercise);
# 4. updates the state: `m_new = max(m_i, max(s, 1))`, `alpha = exp2(m_i - m_new)`,
#    `p = exp2(s - m_new[:, None])`, `l_i = l_i * alpha + sum(p, 1)`, and
#    `acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)` (P in the inputs' dtype, as
#    FlashAttention feeds the Tensor Cores; the sum stays float32).
#
# When causal, the loop ends at `min(T_K, T_K - T_Q + (tile + 1) * BLOCK_M)`, just past the
# position of the tile's last query: the key blocks after it would be all `-inf`, so a causal
# prefill does half the work. Every row sees key 0 in the first block, so `m_new` is finite from
# then on and `exp2(-inf - m_new) = 0` is safe. At the end, store `acc / l_i[:, None]` in the
# output's dtype for the rows `< T_Q`, and the log-sum-exp in **natural** log,
# `(m_i + log2(l_i)) * ln 2`, into `lse` (float32, one per row).
#
# Tensors are flattened to (batch x heads, T, hs): program `(tile, bh)` reads rows
# `tile * BLOCK_M + arange(BLOCK_M)` of `q_ptr + bh * stride_qh` (row stride `stride_qt`; the
# head-size stride is 1). The launcher and the host function are provided. On a CPU the kernel
# runs in Triton's interpreter with 16 x 16 blocks and float32 data (the interpreter's bfloat16
# products are unreliable); on a GPU a check runs bfloat16 and float16 at a real head size
# against torch's `scaled_dot_product_attention`. Write the kernel yourself: when grading, the
# reference `aisys.triton_kernels.flash_attention` cannot be imported.

# %%
import math

import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("07-inference/triton_flash_attention", globals())

DEVICE = device.current()
print(device.describe())
LOG2_E = 1.4426950408889634


# %% [markdown]
# ## The kernel

# %% tags=["solution"]
@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, scale_log2, T_Q, T_K,
                           stride_qh, stride_qt, stride_kh, stride_kt,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):
    """Rows [tile * BLOCK_M, + BLOCK_M) of O and lse for the (batch x head) index program_id(1).

    q and o: (BH, T_Q, HEAD_DIM) with strides (stride_qh, stride_qt, 1); k and v: (BH, T_K, HEAD_DIM) with
    strides (stride_kh, stride_kt, 1); lse: (BH, T_Q) float32, contiguous."""
    ### BEGIN SOLUTION
    tile = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_in = offs_m < T_Q
    q = tl.load(q_ptr + bh * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :], mask=rows_in[:, None],
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    offset = T_K - T_Q  # position of query 0
    end = T_K
    if CAUSAL:
        end = tl.minimum(T_K, offset + (tile + 1) * BLOCK_M)  # past the tile's last query: all masked
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keys_in = offs_n < T_K
        k = tl.load(k_ptr + bh * stride_kh + offs_n[None, :] * stride_kt + offs_d[:, None], mask=keys_in[None, :],
                    other=0.0)
        v = tl.load(v_ptr + bh * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :], mask=keys_in[:, None],
                    other=0.0)
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2
        visible = keys_in[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= (offset + offs_m)[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + bh * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rows_in[:, None])
    tl.store(lse_ptr + bh * T_Q + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows_in)
    ### END SOLUTION


# %% [markdown]
# ## The launcher (provided)
#
# `flash_attention(q, k, v, causal, dtype)` takes numpy arrays q (B, nh, Tq, hs) and k, v
# (B, nh, Tk, hs) holding `dtype` data, launches one program per (block of queries, batch x
# head) and returns `[out, lse]`: out (B, nh, Tq, hs) as numpy (bf16 as float32), lse
# (B, nh, Tq) float32.

# %%
def flash_attention(q, k, v, causal, dtype):
    """softmax(q k^T / sqrt(hs)) v per (batch, head), causal bottom-right: [out (B, nh, Tq, hs), lse (B, nh, Tq)]."""
    q, k, v = (to_device(x, dtype) for x in (q, k, v))
    batch, heads, t_q, head_size = q.shape
    t_k = k.shape[2]
    q, k, v = (x.reshape(batch * heads, -1, head_size) for x in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((batch * heads, t_q), dtype=torch.float32, device=q.device)
    # 16 x 16 blocks wherever the checks use small float32 inputs, so that a GPU runs the same several key
    # blocks per row as the interpreter does (one 64-key block would hide a missing rescale); FlashAttention's
    # sizes for 16-bit inputs on a GPU.
    big = DEVICE != "cpu" and dtype != "fp32"
    block_m, block_n, warps, stages = (128, 64, 8, 3) if big else (16, 16, 4, 1)
    grid = (triton.cdiv(t_q, block_m), batch * heads)
    try:
        flash_attention_kernel[grid](q, k, v, out, lse, LOG2_E / math.sqrt(head_size), t_q, t_k,
                                     q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                     HEAD_DIM=head_size, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
                                     PRECISION="ieee" if q.dtype == torch.float32 else None,
                                     num_warps=warps, num_stages=stages)
    except Exception as error:  # Triton wraps what the kernel raises: say plainly that the kernel is still empty
        if "NotImplementedError" in str(error):
            raise NotImplementedError("flash_attention_kernel is not written yet") from error
        raise
    return [to_numpy(out.reshape(batch, heads, t_q, head_size)), to_numpy(lse.reshape(batch, heads, t_q))]


# %% [markdown]
# Compare with the plain computation on a ragged length (40 keys: two full blocks and a half one):

# %%
def naive(q, k, v, causal):
    """softmax(q k^T / sqrt(hs)) v in float64 with every score, causal bottom-right."""
    scores = np.einsum("bhqd,bhkd->bhqk", q, k).astype(np.float64) / math.sqrt(q.shape[-1])
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = np.where(np.arange(t_k)[None, :] <= np.arange(t_k - t_q, t_k)[:, None], scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return p @ v / p.sum(-1, keepdims=True)


rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 2, 40, 16)).astype(np.float32) for _ in range(3))
for causal in (False, True):
    print(causal, np.abs(flash_attention(q, k, v, causal, "fp32")[0] - naive(q, k, v, causal)).max())

# %% tags=["check"]
check("flash_forward")
### BEGIN HIDDEN TESTS
check("flash_forward", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_forward_causal")
### BEGIN HIDDEN TESTS
check("flash_forward_causal", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_forward_large_logits")
### BEGIN HIDDEN TESTS
check("flash_forward_large_logits", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What makes it FlashAttention is the work it does, which the grader counts by running
# `flash_attention` again in Triton's interpreter on a 64-token prefill: one pass over the
# keys (two `tl.dot`s per block of keys, no first pass for the maximum), and, when causal,
# no key block past a tile's last query, which makes a causal prefill about half the work.

# %% tags=["check"]
check("flash_forward_tiles")
### BEGIN HIDDEN TESTS
check("flash_forward_tiles", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## On a GPU
#
# There the launcher uses 128 x 64 blocks with 8 warps and 3 pipeline stages, and the check
# runs bfloat16 and float16 inputs with head sizes 64 and 128 against torch's
# `scaled_dot_product_attention`. On a CPU it is skipped. The reference
# `aisys.triton_kernels.flash_attention` adds what makes it fast: the blocks wholly before the
# diagonal run without computing a mask, the block sizes and pipeline depth are autotuned, and
# grouped-query heads read their shared key/value head; `benchmarks/flash_attention.py` measures
# it against SDPA on an H100.

# %% tags=["check"]
check("flash_forward_gpu")
### BEGIN HIDDEN TESTS
check("flash_forward_gpu", hidden=True)
### END HIDDEN TESTS


# %% [markdown]
# ## Graded speed (on a GPU)
#
# Two more checks time your kernel, through `flash_attention`, on causal float16 attention of 4
# x 16 heads of 4096 tokens with head size 64: 1 point if it runs at 25% or more of the speed
# of torch's `scaled_dot_product_attention` (FlashAttention, in cuDNN or CUDA), 1 more at 50%
# or more. The kernel above reaches about 70% on an H200; with float32 `tl.dot`s, under 1%.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with torch's
# attention on the same inputs, measured in the same run. Without a GPU both checks are
# skipped, and the notebook is graded without their points.

# %% tags=["check"]
check("flash_attention_speed")
### BEGIN HIDDEN TESTS
check("flash_attention_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_attention_near_sdpa_speed")
### BEGIN HIDDEN TESTS
check("flash_attention_near_sdpa_speed", hidden=True)
### END HIDDEN TESTS
