"""FlashAttention-2's backward pass in Triton: dQ, dK, dV from dO, recomputing P tile by tile from the stored lse.

The forward (`aisys.triton_kernels.flash_attention`) keeps O and, per query row, the natural
log-sum-exp lse = m + log(l) of its scaled scores, and nothing of size T x T. With S = scale * Q K^T,
P = softmax(S) (rows), O = P V and the upstream gradient dO, the gradients are (Dao 2023, section 3.1.2,
algorithm 2):

    dV = P^T dO                       dP = dO V^T
    dS = P * (dP - delta),            delta_i = sum_j P_ij dP_ij = rowsum(dO * O)_i
    dQ = scale * dS K                 dK = scale * dS^T Q

(the softmax's Jacobian, diag(p) - p p^T, applied to a row of dP gives p * (dP - p . dP), and
p . dP = p . (V dO_i) = O_i . dO_i). Any tile of P is exp(scale * q k^T - lse) of its q and k tiles:
recomputing it costs two more tl.dots per pair of tiles, where storing it would cost T^2 numbers per
head written and read back (as many bytes as the forward avoided).

Three kernels, as FlashAttention-2 and Triton's tutorial 06 (fused attention) arrange them:

- `delta_kernel`: delta = rowsum(dO * O) in float32, one program per block of query rows;
- `dkdv_kernel`: one program per (block of BLOCK_N keys, batch x kv head). It holds its k and v tiles and
  float32 dK, dV accumulators, and walks the query blocks of every query head that reads this kv head
  (grouped-query attention: dK and dV of a kv head sum over its nh / nkv query heads), recomputing the
  transposed tile P^T = exp2(k q^T * scale log2 e - lse log2 e) per block: dV += P^T dO,
  dP^T = v dO^T, dS^T = P^T * (dP^T - delta), dK += dS^T q; at the end dK *= scale;
- `dq_kernel`: one program per (block of BLOCK_M queries, batch x head), walking the key blocks: P, dP and
  dS as above, dQ += dS k; at the end dQ *= scale.

Each program owns the rows it writes, so no atomics are needed (FlashAttention-2's dQ uses atomic adds
instead of the separate dQ pass; this costs q k^T and dO v^T once more, 7 tl.dots per pair of tiles
against 5). Causal is bottom-right (query i at position Tk - Tq + i): a key block starts its query loop at
the block holding the first query that sees it, a query block stops at the block holding its last visible
key, and every tile is masked (the few tiles that need it are the diagonal ones; masking the others costs a
select per score, which keeps the kernels short). Ragged lengths are masks: rows past Tq and keys past Tk
are loaded as zeros and take no part. Inputs float32, float16 or bfloat16, head size 16 to 128 (as the
forward); P and dS are rounded to the inputs' dtype before their tl.dots, as FlashAttention does, with
float32 accumulators. Float32 inputs are multiplied in IEEE float32 (`_tensors.dot_precision`).
"""

import math

import torch
import triton
import triton.language as tl

from aisys._validate import positive_number

from ._tensors import dot_precision, float_tensor, interpreted
from .flash_attention import check_shapes, flash_attention


def _config(block_m, block_n, stages, warps):
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_stages=stages, num_warps=warps)


# For Hopper, as Triton's tutorial 06 tunes its backward: 64 or 128 rows per tile, 2 or 3 stages, 4 or 8
# warps. The backward holds more per program than the forward (k, v and two float32 accumulators in dK/dV),
# so the 128 x 128 tiles are left out.
GPU_CONFIGS = [
    _config(64, 64, 2, 4), _config(64, 64, 3, 4), _config(64, 128, 2, 8), _config(64, 128, 3, 8),
    _config(128, 64, 2, 8), _config(128, 64, 3, 8), _config(32, 128, 2, 4),
]
INTERPRETER_CONFIGS = [_config(16, 16, 1, 4)]
DELTA_BLOCK = 64  # query rows per program of delta_kernel


@triton.jit
def delta_kernel(o_ptr, do_ptr, delta_ptr, T_Q, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """delta[bh, i] = sum_d dO[bh, i, d] * O[bh, i, d] in float32, for (BH, T_Q, HEAD_DIM) contiguous O and dO."""
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_in = offs_m < T_Q
    where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + where, mask=rows_in[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + where, mask=rows_in[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * T_Q + offs_m, tl.sum(o * do, 1), mask=rows_in)


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS,
                 key=["T_Q", "T_K", "HEAD_DIM", "CAUSAL", "GROUP"])
@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, scale, T_Q, T_K, N_HEADS, GROUP,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dK, dV of keys [BLOCK_N * program_id(0), + BLOCK_N) of the (batch, kv head) pair program_id(1).

    q, do: (B * N_HEADS, T_Q, HEAD_DIM); k, v, dk, dv: (B * N_HEADS / GROUP, T_K, HEAD_DIM); lse, delta:
    (B * N_HEADS, T_Q) float32; all contiguous."""
    batch_kv = tl.program_id(1).to(tl.int64)
    n_kv = N_HEADS // GROUP
    batch, kv_head = batch_kv // n_kv, batch_kv % n_kv
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys_in = offs_n < T_K
    kv_where = batch_kv * T_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(k_ptr + kv_where, mask=keys_in[:, None], other=0.0)
    v = tl.load(v_ptr + kv_where, mask=keys_in[:, None], other=0.0)
    if UPCAST:  # Triton's interpreter multiplies bfloat16 wrongly: give it float32 (exact for bf16 values)
        k, v = k.to(tl.float32), v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)

    query_offset = T_K - T_Q  # position of query 0 (bottom-right causal)
    start = 0
    if CAUSAL:  # the first query that sees this block's first key sits at row (first key - query_offset)
        start = tl.maximum(tl.program_id(0) * BLOCK_N - query_offset, 0) // BLOCK_M * BLOCK_M
    scale_log2 = scale * 1.4426950408889634
    for head in range(kv_head * GROUP, kv_head * GROUP + GROUP):  # the query heads reading this kv head
        bh = batch * N_HEADS + head
        for start_m in range(start, T_Q, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            rows_in = offs_m < T_Q
            q_where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
            q = tl.load(q_ptr + q_where, mask=rows_in[:, None], other=0.0)
            do = tl.load(do_ptr + q_where, mask=rows_in[:, None], other=0.0)
            lse = tl.load(lse_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0) * 1.4426950408889634  # log2 units
            delta = tl.load(delta_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0)
            if UPCAST:
                q, do = q.to(tl.float32), do.to(tl.float32)
            # P^T for this (key block, query block): (BLOCK_N, BLOCK_M), from the stored log-sum-exp
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2
            visible = keys_in[:, None] & rows_in[None, :]
            if CAUSAL:
                visible = visible & (offs_n[:, None] <= (query_offset + offs_m)[None, :])
            p_t = tl.where(visible, tl.exp2(s_t - lse[None, :]), 0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])
            dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PRECISION)
    tl.store(dk_ptr + kv_where, (dk * scale).to(dk_ptr.dtype.element_ty), mask=keys_in[:, None])
    tl.store(dv_ptr + kv_where, dv.to(dv_ptr.dtype.element_ty), mask=keys_in[:, None])


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS,
                 key=["T_Q", "T_K", "HEAD_DIM", "CAUSAL", "GROUP"])
@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, scale, T_Q, T_K, N_HEADS, GROUP,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dQ of rows [BLOCK_M * program_id(0), + BLOCK_M) of the (batch, head) pair program_id(1); layouts as
    dkdv_kernel's."""
    bh = tl.program_id(1).to(tl.int64)
    batch, head = bh // N_HEADS, bh % N_HEADS
    batch_kv = batch * (N_HEADS // GROUP) + head // GROUP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_in = offs_m < T_Q
    q_where = bh * T_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptr + q_where, mask=rows_in[:, None], other=0.0)
    do = tl.load(do_ptr + q_where, mask=rows_in[:, None], other=0.0)
    if UPCAST:
        q, do = q.to(tl.float32), do.to(tl.float32)
    lse = tl.load(lse_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0) * 1.4426950408889634
    delta = tl.load(delta_ptr + bh * T_Q + offs_m, mask=rows_in, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    query_offset = T_K - T_Q
    end = T_K
    if CAUSAL:  # past the tile's last query every key is masked
        end = tl.minimum(T_K, query_offset + (tl.program_id(0) + 1) * BLOCK_M)
    scale_log2 = scale * 1.4426950408889634
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keys_in = offs_n < T_K
        kv_where = batch_kv * T_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv_where, mask=keys_in[:, None], other=0.0)
        v = tl.load(v_ptr + kv_where, mask=keys_in[:, None], other=0.0)
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        visible = rows_in[:, None] & keys_in[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= (query_offset + offs_m)[:, None])
        p = tl.where(visible, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    tl.store(dq_ptr + q_where, (dq * scale).to(dq_ptr.dtype.element_ty), mask=rows_in[:, None])


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                             do: torch.Tensor, causal: bool = False, scale: float | None = None):
    """(dQ, dK, dV) of softmax(q k^T * scale) v given its output o, its float32 log-sum-exp lse (B, nh, Tq, natural
    log, as `flash_attention(..., return_lse=True)` gives) and the upstream gradient do (o's shape and dtype).

    Layouts and causal as `flash_attention`: q, o, do (B, nh, Tq, hs), k, v (B, nkv, Tk, hs). dQ has q's shape,
    dK and dV k's (summed over the nh / nkv query heads of each kv head), all in q's dtype."""
    q, k, v = float_tensor("q", q, 4), float_tensor("k", k, 4), float_tensor("v", v, 4)
    o, do = float_tensor("o", o, 4), float_tensor("do", do, 4)
    batch, n_heads, t_q, head_size = check_shapes(q, k, v)
    t_k, n_kv_heads = k.shape[2], k.shape[1]
    for name, x in (("o", o), ("do", do)):
        if x.shape != q.shape or x.dtype != q.dtype:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)} and dtype {q.dtype}, "
                             f"got {tuple(x.shape)} {x.dtype}")
    lse = float_tensor("lse", lse, 3)
    if lse.shape != (batch, n_heads, t_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 of shape (B, nh, Tq) = {(batch, n_heads, t_q)}, "
                         f"got {tuple(lse.shape)} {lse.dtype}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if causal and t_q > t_k:
        raise ValueError(f"causal attention needs Tq <= Tk, got q with {t_q} tokens and k with {t_k}")
    scale = 1.0 / math.sqrt(head_size) if scale is None else positive_number("scale", scale)

    delta = torch.empty((batch, n_heads, t_q), dtype=torch.float32, device=q.device)
    delta_kernel[(triton.cdiv(t_q, DELTA_BLOCK), batch * n_heads)](o, do, delta, t_q, HEAD_DIM=head_size,
                                                                   BLOCK=DELTA_BLOCK)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    group = n_heads // n_kv_heads
    common = dict(HEAD_DIM=head_size, CAUSAL=causal, UPCAST=interpreted() and q.dtype == torch.bfloat16,
                  PRECISION=dot_precision(q.dtype))
    dkdv_kernel[lambda meta: (triton.cdiv(t_k, meta["BLOCK_N"]), batch * n_kv_heads)](
        q, k, v, do, lse, delta, dk, dv, scale, t_q, t_k, n_heads, group, **common)
    dq_kernel[lambda meta: (triton.cdiv(t_q, meta["BLOCK_M"]), batch * n_heads)](
        q, k, v, do, lse, delta, dq, scale, t_q, t_k, n_heads, group, **common)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """`flash_attention` with its Triton backward: `FlashAttention.apply(q, k, v, causal, scale, tuned)`."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, scale=None, tuned=True):
        out, lse = flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True, tuned=tuned)
        ctx.save_for_backward(q, k, v, out, lse)  # O (B nh T hs) and lse (B nh T): no T x T tensor
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, d_out.contiguous(), ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, *, tuned: bool = True) -> torch.Tensor:
    """`flash_attention` that autograd can differentiate (through `flash_attention_backward`); `tuned` picks the
    forward kernel as there (the backward is the same for both: it needs only O and lse)."""
    return FlashAttention.apply(q, k, v, causal, scale, tuned)
