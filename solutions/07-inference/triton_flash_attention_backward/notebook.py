# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: FlashAttention's backward pass in Triton
#
# **You will learn** how FlashAttention-2 computes dQ, dK and dV without the (T, T) matrix P: it
# recomputes each tile of P from q, k and the log-sum-exp the forward stored, one program per key
# block accumulating dK and dV over the query blocks, and one per query block accumulating dQ
# (Dao 2023, "FlashAttention-2", section 3.1.2 and algorithm 2). Recomputing costs two more
# `tl.dot`s per pair of tiles; storing P would cost T^2 numbers per head written and read back.
#
# With S = scale q k^T (scale = 1/sqrt(hs)), P = softmax(S) by rows, O = P V and the upstream
# gradient dO:
#
# - dV = P^T dO and dP = dO V^T;
# - dS = P * (dP - delta), where delta_i = sum_j P_ij dP_ij = rowsum(dO * O)_i (the softmax's
#   Jacobian diag(p) - p p^T applied to a row of dP; p . dP_i = p . (V dO_i) = O_i . dO_i);
# - dQ = scale * dS K and dK = scale * dS^T Q (S carries the scale, so its gradient does).
#
# **Conventions.** `flash_attention_backward(q, k, v, o, lse, do, causal, dtype)` (provided) takes
# numpy arrays: q, o, do of shape (B, nh, Tq, hs); k, v of shape (B, nkv, Tk, hs), nh a multiple
# of nkv (grouped-query attention: query head h reads kv head h // (nh // nkv), so dK and dV of a
# kv head are **sums over its nh / nkv query heads**); lse (B, nh, Tq) float32, the **natural**
# log-sum-exp of each row of scaled scores, as the forward stores it. All hold `dtype` data
# ("fp32", "fp16" or "bf16"); it returns `[dq, dk, dv]` of q's, k's and v's shapes as numpy
# (bf16 as float32). Causal is bottom-right: query row r sits at position Tk - Tq + r and sees
# key n iff n <= Tk - Tq + r (Tq <= Tk). Rows past Tq and keys past Tk (a ragged last block) take
# no part. The launcher flattens the tensors to (B * heads, T, hs), contiguous, and launches:
#
# 1. `delta_kernel`, one program per (block of `BLOCK` rows, batch x head): delta = rowsum(dO * O)
#    in float32, into `delta_ptr` (B * nh, Tq);
# 2. `dkdv_kernel`, one program per (block of `BLOCK_N` keys, batch x kv head): holds its k and v
#    tiles and float32 dK, dV accumulators, and walks every query block of every query head of its
#    group (`head` from `kv_head * GROUP` to `kv_head * GROUP + GROUP - 1`, `bh = batch * N_HEADS
#    + head`); when causal, it starts at the query block holding the first query that sees its first
#    key (row `BLOCK_N * program_id(0) - (T_K - T_Q)`, clipped at 0), since earlier queries see
#    none of its keys;
# 3. `dq_kernel`, one program per (block of `BLOCK_M` queries, batch x head): walks the key blocks
#    of its kv head (`batch * (N_HEADS // GROUP) + head // GROUP`) and, when causal, stops at
#    `min(T_K, T_K - T_Q + (program_id(0) + 1) * BLOCK_M)`, as the forward does.
#
# In both, a tile of P is `exp2(s * scale_log2 - lse * log2(e))` with s = q k^T: the launcher
# passes `scale` and the kernels use base-2 exponentials, so the natural-log lse must be
# converted too. Masked scores (keys past T_K, rows past T_Q, causal) get P = 0. Round P and dS to
# the inputs' dtype before their `tl.dot`s (`.to(q.dtype)`; the accumulators stay float32), pass
# `input_precision=PRECISION` to every `tl.dot` ("ieee" for float32 inputs, else the default),
# multiply dK and dQ by `scale` once at the end, and store in the outputs' dtype. Each program
# writes only its own rows, so no atomics are needed.
#
# On a CPU the kernels run in Triton's interpreter with 16 x 16 blocks on float32 data; on a GPU a
# check runs bfloat16 at real head sizes. Write the kernels yourself: when grading, the reference
# `aisys.triton_kernels.flash_attention_backward` cannot be imported.

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

check = checker("07-inference/triton_flash_attention_backward", globals())

DEVICE = device.current()
print(device.describe())


# %% [markdown]
# ## 1. delta = rowsum(dO * O)

# %% tags=["solution"]
@triton.jit
def delta_kernel(o_ptr, do_ptr, delta_ptr, T_Q, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """delta[bh, i] = sum_d dO[bh, i, d] * O[bh, i, d] in float32 for rows [BLOCK * program_id(0), + BLOCK) of
    bh = program_id(1); o, do: (BH, T_Q, HEAD_DIM) contiguous, delta: (BH, T_Q) float32."""
    ### BEGIN SOLUTION
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_in = offs_m < T_Q
    where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + where, mask=rows_in[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + where, mask=rows_in[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * T_Q + offs_m, tl.sum(do * o, 1), mask=rows_in)
    ### END SOLUTION


# %% [markdown]
# ## 2. dK and dV, one program per key block

# %% tags=["solution"]
@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, scale, T_Q, T_K, N_HEADS, GROUP,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dK, dV of keys [BLOCK_N * program_id(0), + BLOCK_N) of the (batch, kv head) index program_id(1).

    q, do: (B * N_HEADS, T_Q, HEAD_DIM); k, v, dk, dv: (B * N_HEADS // GROUP, T_K, HEAD_DIM); lse, delta:
    (B * N_HEADS, T_Q) float32; all contiguous."""
    ### BEGIN SOLUTION
    batch_kv = tl.program_id(1).to(tl.int64)
    n_kv = N_HEADS // GROUP
    batch, kv_head = batch_kv // n_kv, batch_kv % n_kv
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys_in = offs_n < T_K
    kv_where = batch_kv * T_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(k_ptr + kv_where, mask=keys_in[:, None], other=0.0)
    v = tl.load(v_ptr + kv_where, mask=keys_in[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    offset = T_K - T_Q  # position of query 0
    start = 0
    if CAUSAL:  # earlier query blocks see none of these keys
        start = tl.maximum(tl.program_id(0) * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M
    scale_log2 = scale * 1.4426950408889634
    for head in range(kv_head * GROUP, kv_head * GROUP + GROUP):  # every query head reading this kv head
        bh = batch * N_HEADS + head
        for start_m in range(start, T_Q, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            rows_in = offs_m < T_Q
            q_where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
            q = tl.load(q_ptr + q_where, mask=rows_in[:, None], other=0.0)
            do = tl.load(do_ptr + q_where, mask=rows_in[:, None], other=0.0)
            lse = tl.load(lse_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0) * 1.4426950408889634
            delta = tl.load(delta_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0)
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2  # (BLOCK_N, BLOCK_M): S^T
            visible = keys_in[:, None] & rows_in[None, :]
            if CAUSAL:
                visible = visible & (offs_n[:, None] <= (offset + offs_m)[None, :])
            p_t = tl.where(visible, tl.exp2(s_t - lse[None, :]), 0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])
            dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PRECISION)
    dk = dk * scale
    tl.store(dk_ptr + kv_where, dk.to(dk_ptr.dtype.element_ty), mask=keys_in[:, None])
    tl.store(dv_ptr + kv_where, dv.to(dv_ptr.dtype.element_ty), mask=keys_in[:, None])
    ### END SOLUTION


# %% [markdown]
# ## 3. dQ, one program per query block

# %% tags=["solution"]
@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, scale, T_Q, T_K, N_HEADS, GROUP,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dQ of rows [BLOCK_M * program_id(0), + BLOCK_M) of the (batch, head) index program_id(1); layouts as
    dkdv_kernel's, dq as q."""
    ### BEGIN SOLUTION
    bh = tl.program_id(1).to(tl.int64)
    batch, head = bh // N_HEADS, bh % N_HEADS
    batch_kv = batch * (N_HEADS // GROUP) + head // GROUP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_in = offs_m < T_Q
    q_where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptr + q_where, mask=rows_in[:, None], other=0.0)
    do = tl.load(do_ptr + q_where, mask=rows_in[:, None], other=0.0)
    lse = tl.load(lse_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0) * 1.4426950408889634
    delta = tl.load(delta_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    offset = T_K - T_Q
    end = T_K
    if CAUSAL:
        end = tl.minimum(T_K, offset + (tl.program_id(0) + 1) * BLOCK_M)
    scale_log2 = scale * 1.4426950408889634
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keys_in = offs_n < T_K
        kv_where = batch_kv * T_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv_where, mask=keys_in[:, None], other=0.0)
        v = tl.load(v_ptr + kv_where, mask=keys_in[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        visible = rows_in[:, None] & keys_in[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= (offset + offs_m)[:, None])
        p = tl.where(visible, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    dq = dq * scale
    tl.store(dq_ptr + q_where, dq.to(dq_ptr.dtype.element_ty), mask=rows_in[:, None])
    ### END SOLUTION


# %% [markdown]
# ## The launcher (provided)

# %%
def flash_attention_backward(q, k, v, o, lse, do, causal, dtype):
    """[dq, dk, dv] of softmax(q k^T / sqrt(hs)) v (causal bottom-right) given o, the natural-log lse and dO."""
    q, k, v, o, do = (to_device(x, dtype) for x in (q, k, v, o, do))
    lse = to_device(lse, "fp32")
    batch, heads, t_q, head_size = q.shape
    kv_heads, t_k = k.shape[1], k.shape[2]
    q, o, do = (x.reshape(batch * heads, t_q, head_size).contiguous() for x in (q, o, do))
    k, v = (x.reshape(batch * kv_heads, t_k, head_size).contiguous() for x in (k, v))
    lse = lse.reshape(batch * heads, t_q).contiguous()
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # 16 x 16 blocks for the small float32 inputs of the CPU checks (several blocks per row, as in the interpreter);
    # 64 x 64 with 4 warps for 16-bit inputs on a GPU.
    big = DEVICE != "cpu" and dtype != "fp32"
    block, warps, stages = (64, 4, 2) if big else (16, 4, 1)
    precision = "ieee" if q.dtype == torch.float32 else None
    try:
        delta_kernel[(triton.cdiv(t_q, block), batch * heads)](o, do, delta, t_q, HEAD_DIM=head_size, BLOCK=block)
        common = dict(HEAD_DIM=head_size, CAUSAL=causal, PRECISION=precision, BLOCK_M=block, BLOCK_N=block,
                      num_warps=warps, num_stages=stages)
        args = (q, k, v, do, lse, delta)
        sizes = (1 / math.sqrt(head_size), t_q, t_k, heads, heads // kv_heads)
        dkdv_kernel[(triton.cdiv(t_k, block), batch * kv_heads)](*args, dk, dv, *sizes, **common)
        dq_kernel[(triton.cdiv(t_q, block), batch * heads)](*args, dq, *sizes, **common)
    except Exception as error:  # Triton wraps what the kernel raises: say plainly that a kernel is still empty
        if "NotImplementedError" in str(error):
            raise NotImplementedError("a backward kernel is not written yet") from error
        raise
    return [to_numpy(dq.reshape(batch, heads, t_q, head_size)), to_numpy(dk.reshape(batch, kv_heads, t_k, head_size)),
            to_numpy(dv.reshape(batch, kv_heads, t_k, head_size))]


# %% [markdown]
# Compare with torch's autograd of the plain computation, on a ragged length with two query heads
# per kv head, causal:

# %%
def naive_grads(q, k, v, do, causal):
    """[o, lse, dq, dk, dv] of attention written plainly in float64, by torch autograd."""
    q, k, v = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t_q, t_k = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q), float("-inf"))
    out = torch.softmax(scores, -1) @ v.repeat_interleave(group, 1)
    grads = torch.autograd.grad(out, (q, k, v), torch.tensor(do, dtype=torch.float64))
    return [out.detach().numpy(), torch.logsumexp(scores, -1).detach().numpy(), *(g.numpy() for g in grads)]


rng = np.random.default_rng(0)
q, do = (rng.standard_normal((1, 2, 20, 16)).astype(np.float32) for _ in range(2))
k, v = (rng.standard_normal((1, 1, 20, 16)).astype(np.float32) for _ in range(2))
o, lse, *expected = naive_grads(q, k, v, do, True)
got = flash_attention_backward(q, k, v, o.astype(np.float32), lse.astype(np.float32), do, True, "fp32")
print([float(np.abs(g - e).max()) for g, e in zip(got, expected)])

# %% tags=["check"]
check("backward_full")
### BEGIN HIDDEN TESTS
check("backward_full", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("backward_causal")
### BEGIN HIDDEN TESTS
check("backward_causal", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("backward_gqa")
### BEGIN HIDDEN TESTS
check("backward_gqa", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## P is recomputed, never stored
#
# The grader runs `flash_attention_backward` again in Triton's interpreter, on a 32-token prefill
# and a causal 48-token one, head size 16, and reads what the launches did: the kernels store only
# delta, dQ, dK and dV (nothing of size T x T), read the stored lse, and multiply no more than the
# 7 `tl.dot`s per pair of (query, key) tiles this design needs (the 5 of algorithm 2, plus q k^T
# and dO v^T again in the dQ pass); a second pass to find the row max and sum again, instead of
# reading lse, costs more. Causal, the blocks past the diagonal are skipped in both kernels, about
# half the work (6 of the 9 pairs of tiles at 48 tokens).

# %% tags=["check"]
check("backward_recomputes")
### BEGIN HIDDEN TESTS
check("backward_recomputes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## On a GPU
#
# There the launcher uses 64 x 64 blocks, and the check runs bfloat16 with head sizes 64 and 128,
# causal and not, grouped-query heads included, against gradients computed in float64. On a CPU it
# is skipped. The reference `aisys.triton_kernels.flash_attention_backward` autotunes the block
# sizes; `benchmarks/flash_attention_backward.py` times it against torch's SDPA backward.

# %% tags=["check"]
check("backward_gpu")
### BEGIN HIDDEN TESTS
check("backward_gpu", hidden=True)
### END HIDDEN TESTS
