"""FlashAttention-2's forward pass in Triton: softmax(q k^T * scale) v without writing the (T, T) scores to memory.

Tensors are laid out as `torch.nn.functional.scaled_dot_product_attention` takes them:
q (B, nh, Tq, hs), k and v (B, nkv, Tk, hs), with nh a multiple of nkv (grouped-query
attention: query head h reads key/value head h // (nh // nkv)). The numpy reference, with the
derivation, is `aisys.inference.flash_attention`; this is its GPU form (Dao 2023):

- one program per (block of BLOCK_M queries, batch x head): the q tile stays in registers while
  the program walks the keys and values in blocks of BLOCK_N, so K and V stream from memory (and
  L2) and nothing of size T x T is ever stored;
- per block, `tl.dot` gives the (BLOCK_M, BLOCK_N) scores on the Tensor Cores, the online softmax
  updates the running max m and sum l in float32 and rescales the float32 accumulator, and a
  second `tl.dot` adds P v (P rounded to the inputs' dtype, as FlashAttention does);
- exponentials in base 2: exp(x) = 2^(x log2 e), with log2 e folded into the scale, so each score
  costs one multiply and one `exp2` (the GPU's native MUFU.EX2);
- causal (bottom-right: query i sits at position Tk - Tq + i, as `aisys.inference.attention`):
  the blocks wholly before the tile's first query run without a mask, the loop stops after the
  block holding the tile's last query, and only the blocks in between (the diagonal) are masked.
  The blocks past the diagonal, half of the work at Tq == Tk, are never loaded;
- the output is divided by l once, at the end, and the log-sum-exp m + log(l) of each row (natural
  log, float32, shape (B, nh, Tq)) is stored for a backward pass.

Ragged lengths work through masks: key blocks past Tk load zeros and score -inf, query rows past Tq
are computed on zeros and never stored. Inputs float32, float16 or bfloat16 (one dtype), head size
16, 32, 64 or 128 (`tl.dot` needs >= 16; a power of two for `tl.arange`). On a GPU BLOCK_M,
BLOCK_N, num_warps and num_stages are autotuned per shape; the interpreter runs 16 x 16 tiles.
Float32 inputs are multiplied in IEEE float32 (`_tensors.dot_precision`), not the GPU's default TF32.

`flash_attention` runs, by default (`tuned=True`), `flash_attention_tma_kernel`: the same algorithm with q, K,
V and O moved by tensor descriptors (Hopper's TMA: one instruction copies a whole tile to shared memory,
zero-filling past each head's end, instead of every thread computing and issuing its own addresses), as
Triton's fused-attention tutorial (06) does on Hopper, with the tutorial's Hopper autotuning space plus
FlashAttention-2's 128 x 128 tile of 4 warps for head sizes up to 64, and, when causal, the longest q tiles
started first. `tuned=False` runs `flash_attention_kernel`, the readable kernel described above, which the
tuned one also falls back to where TMA cannot run (`tma_refusal`: a Triton without tensor descriptors, a GPU
older than Hopper, a tensor whose start is not 16-byte aligned). (Triton's automatic warp specialisation of the
key loop, `tl.range(..., warp_specialize=True)`, which the tutorial turns on for Blackwell only, fails to
compile this loop for sm_90: it is left out.)
"""

import math

import torch
import triton
import triton.language as tl

from aisys._validate import positive_number

from ._tensors import dot_precision, float_tensor, interpreted

try:  # host-side tensor descriptors: Triton >= 3.3
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: the readable kernel runs
    TensorDescriptor = None

HEAD_SIZES = (16, 32, 64, 128)
LOG2_E = 1.4426950408889634  # exp(x) == exp2(x * LOG2_E)


def _config(block_m, block_n, stages, warps):
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_stages=stages, num_warps=warps)


# As Triton's tutorial 06 (fused attention) tunes for Hopper: 128-query tiles (8 warps give each
# warpgroup 64 rows for wgmma), 64 or 128 keys per block, 2 to 4 stages of K/V in shared memory
# (at hs = 128, bf16: (64 + 64) * 128 * 2 bytes = 32 KiB per stage for BLOCK_N = 64, far under the
# 227 KiB a block may use). 64-query tiles keep all 132 SMs busy when B * nh * Tq / 128 is small. The first is
# the one the GPU tests pin (tests/conftest.py, AISYS_PIN_AUTOTUNE): it fits every dtype and head size.
GPU_CONFIGS = [
    _config(128, 64, 2, 4), _config(128, 64, 3, 4), _config(128, 64, 3, 8), _config(128, 64, 4, 8),
    _config(128, 128, 2, 8), _config(128, 128, 3, 8), _config(128, 32, 3, 4),
    _config(64, 64, 3, 4), _config(64, 64, 4, 4), _config(64, 128, 3, 4),
]
INTERPRETER_CONFIGS = [_config(16, 16, 1, 4)]  # the interpreter's time goes by programs and blocks, not tile size


@triton.jit
def _attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kt, stride_vt, offs_m, query_offset, T_K,
                   start, end, scale_log2,
                   HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Fold the key blocks [start, end) into the running state (acc, l, m) of one q tile."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_range = offs_n < T_K
        # k as (HEAD_DIM, BLOCK_N): q @ k is the (BLOCK_M, BLOCK_N) tile of scores
        k = tl.load(k_base + offs_n[None, :] * stride_kt + offs_d[:, None], mask=in_range[None, :], other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=in_range[:, None], other=0.0)
        if UPCAST:  # Triton's interpreter multiplies bfloat16 wrongly: give it float32 (exact for bf16 values)
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2  # log2 units: exp2(s) == exp(score * scale)
        if MASKED:
            visible = in_range[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= (query_offset + offs_m)[:, None])
            s = tl.where(visible, s, float("-inf"))
        # Every row sees a key in the first block it folds in (key 0 or the unmasked blocks before the
        # diagonal), so m_new is finite from the first block on and exp2(-inf - m_new) = 0 is safe.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)  # the old state was taken against m_i: rescale it to m_new
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS,
                 key=["T_Q", "T_K", "HEAD_DIM", "CAUSAL"])
@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, scale_log2, T_Q, T_K, N_HEADS, GROUP,
                           stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                           stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                           PRECISION: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows [BLOCK_M * program_id(0), + BLOCK_M) of O and lse for the (batch, head) pair program_id(1)."""
    tile = tl.program_id(0)
    batch_head = tl.program_id(1).to(tl.int64)  # batch * stride may pass 2**31 in a large batch
    batch, head = batch_head // N_HEADS, batch_head % N_HEADS
    kv_head = head // GROUP
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + kv_head * stride_kh
    v_base = v_ptr + batch * stride_vb + kv_head * stride_vh

    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_in_range = offs_m < T_Q
    q = tl.load(q_base + offs_m[:, None] * stride_qt + offs_d[None, :], mask=row_in_range[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    query_offset = T_K - T_Q  # position of query 0 (bottom-right causal)
    if CAUSAL:
        # Blocks whose keys all lie at or before the tile's first query need no mask; the loop ends at the
        # block holding the tile's last query (rows past T_Q have positions past T_K - 1: clip to T_K).
        first_query = query_offset + tile * BLOCK_M
        unmasked_end = (first_query + 1) // BLOCK_N * BLOCK_N
        end = tl.minimum(first_query + BLOCK_M, T_K)
    else:
        unmasked_end = T_K // BLOCK_N * BLOCK_N  # only a ragged last block needs a mask
        end = T_K
    acc, l_i, m_i = _attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kt, stride_vt, offs_m, query_offset,
                                   T_K, 0, unmasked_end, scale_log2, HEAD_DIM, BLOCK_N, False, CAUSAL, UPCAST,
                                   PRECISION)
    acc, l_i, m_i = _attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kt, stride_vt, offs_m, query_offset,
                                   T_K, unmasked_end, end, scale_log2, HEAD_DIM, BLOCK_N, True, CAUSAL, UPCAST,
                                   PRECISION)

    out = acc / l_i[:, None]  # divide once, at the end
    o_base = o_ptr + batch * stride_ob + head * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_ot + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=row_in_range[:, None])
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back from log2 units to a natural log
    tl.store(lse_ptr + batch_head * T_Q + offs_m, lse, mask=row_in_range)


# The tuned kernel ----------------------------------------------------------------------------------------------------

def _tma_block_shapes(nargs):
    """Autotuner pre-hook: the descriptors' tile shapes follow the config's BLOCK_M and BLOCK_N."""
    head_dim = nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["desc_o"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["desc_k"].block_shape = [1, nargs["BLOCK_N"], head_dim]
    nargs["desc_v"].block_shape = [1, nargs["BLOCK_N"], head_dim]


def _tma_config(block_m, block_n, stages, warps):
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_stages=stages, num_warps=warps,
                         pre_hook=_tma_block_shapes)


# Tutorial 06's Hopper space (BLOCK_M 64/128, BLOCK_N 64/128, 2-4 stages, 4/8 warps), less the 8-warp configs of
# small tiles it drops itself, plus FlashAttention-2's tile for d = 64 (128 x 128 with 4 warps: its launch code notes
# 8 warps and 64 x 256 or 256 x 64 tiles as slower, on an A100 at 2k tokens). The first config is the one the GPU
# tests pin (tests/conftest.py, AISYS_PIN_AUTOTUNE): its tiles fit every dtype and head size, and its diagonal spans
# two key blocks.
TMA_GPU_CONFIGS = [
    _tma_config(128, 64, 2, 4), _tma_config(128, 64, 3, 4), _tma_config(128, 64, 4, 4),
    _tma_config(128, 64, 3, 8), _tma_config(128, 64, 4, 8),
    _tma_config(128, 128, 3, 4), _tma_config(128, 128, 4, 4),
    _tma_config(128, 128, 2, 8), _tma_config(128, 128, 3, 8),
    _tma_config(64, 64, 3, 4), _tma_config(64, 64, 4, 4), _tma_config(64, 128, 3, 4),
]
# At hs <= 64 the autotuner may pick only these (BLOCK_M, BLOCK_N, stages, warps): timed one at a time on an H100 (B 4,
# nh 32, T 4096, bf16, full and causal, L2 flushed), each ran at 0.92x to 0.97x SDPA's speed, the others at 0.62x to
# 0.93x; the autotuner, given them all, had chosen one at 0.93x. (A pinned test still runs the first config.)
HEAD_64_CONFIGS = {(128, 64, 3, 8), (128, 64, 4, 8), (128, 128, 3, 4), (64, 64, 3, 4), (64, 64, 4, 4),
                   (64, 128, 3, 4)}
TMA_INTERPRETER_CONFIGS = [_tma_config(16, 16, 1, 4)]
SHARED_MEMORY = 227 * 1024  # bytes of shared memory one program may use on an H100


def _tma_fitting_configs(configs, named_args, **kwargs):
    """The configs worth compiling for this launch: the q tile and num_stages K and V tiles fit SHARED_MEMORY (at hs
    = 128 in bf16, BLOCK_N = 128 fits 3 stages and not 4; float32 halves that), and 128 x 128 tiles of 4 warps only
    up to hs = 64, where its 128 scores and 64 accumulators per thread leave room (at 128 they would spill)."""
    head_dim = kwargs["HEAD_DIM"]  # constexprs come as keyword arguments
    element = named_args["desc_q"].base.element_size()

    def fits(config):
        block_m, block_n, stages, warps = shape = _shape(config)
        wide_and_few_warps = block_m * block_n >= 128 * 128 and warps == 4
        tiles = (block_m + 2 * block_n * stages) * head_dim * element
        slow_at_64 = head_dim <= 64 and shape not in HEAD_64_CONFIGS
        return tiles <= SHARED_MEMORY and not (wide_and_few_warps and head_dim > 64) and not slow_at_64
    return [config for config in configs if fits(config)] or configs[:1]


def _shape(config) -> tuple[int, int, int, int]:
    return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_stages, config.num_warps


@triton.jit
def _attend_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, kv_row, offs_m, query_offset, T_K, start, end, scale_log2,
                       HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                       UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """_attend_blocks with K and V tiles loaded by tensor descriptors (rows past T_K come as zeros)."""
    for start_n in range(start, end, BLOCK_N):
        k = desc_k.load([kv_row, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([kv_row, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            visible = (offs_n < T_K)[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= (query_offset + offs_m)[:, None])
            s = tl.where(visible, qk * scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
        else:  # as tutorial 06: the scale applied to the row max, then one fused multiply-add per score
            m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
            p = tl.exp2(qk * scale_log2 - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


# PRECISION tells float32 (IEEE products) from 16-bit inputs: descriptors give the autotuner no dtype to key on, and
# a float32 tile needs twice the shared memory of the config a bfloat16 call of the same shape picked.
@triton.autotune(configs=TMA_INTERPRETER_CONFIGS if interpreted() else TMA_GPU_CONFIGS,
                 key=["T_Q", "T_K", "HEAD_DIM", "CAUSAL", "PRECISION"],
                 prune_configs_by={"early_config_prune": _tma_fitting_configs})
@triton.jit
def flash_attention_tma_kernel(desc_q, desc_k, desc_v, desc_o, lse_ptr, scale_log2, T_Q, T_K, N_HEADS, GROUP,
                         HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                         PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """flash_attention_kernel over 3-D descriptors: q and O (B * nh, Tq, hs), K and V (B * nkv, Tk, hs)."""
    tile = tl.program_id(0)
    if CAUSAL:  # the last q tiles see the most keys: start them first, so the short ones fill the end of the grid
        tile = tl.num_programs(0) - 1 - tile
    batch_head = tl.program_id(1)
    batch, head = batch_head // N_HEADS, batch_head % N_HEADS
    kv_row = batch * (N_HEADS // GROUP) + head // GROUP
    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    q = desc_q.load([batch_head, tile * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)  # rows past T_Q: zeros
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    query_offset = T_K - T_Q
    if CAUSAL:
        first_query = query_offset + tile * BLOCK_M
        unmasked_end = (first_query + 1) // BLOCK_N * BLOCK_N
        end = tl.minimum(first_query + BLOCK_M, T_K)
    else:
        unmasked_end = T_K // BLOCK_N * BLOCK_N
        end = T_K
    acc, l_i, m_i = _attend_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, kv_row, offs_m, query_offset, T_K,
                                       0, unmasked_end, scale_log2, HEAD_DIM, BLOCK_N, False, CAUSAL, UPCAST,
                                       PRECISION)
    acc, l_i, m_i = _attend_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, kv_row, offs_m, query_offset, T_K,
                                       unmasked_end, end, scale_log2, HEAD_DIM, BLOCK_N, True, CAUSAL, UPCAST,
                                       PRECISION)
    out = acc / l_i[:, None]
    desc_o.store([batch_head, tile * BLOCK_M, 0], out.to(desc_o.dtype).reshape(1, BLOCK_M, HEAD_DIM))  # clipped
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    tl.store(lse_ptr + batch_head.to(tl.int64) * T_Q + offs_m, lse, mask=offs_m < T_Q)


def tma_refusal(device: torch.device, tensors) -> str | None:
    """Why flash_attention_tma_kernel cannot take these tensors on `device` (the readable kernel then runs), or None."""
    if TensorDescriptor is None:
        return "this Triton has no host-side tensor descriptors (Triton >= 3.3 has)"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (9, 0):
        return "TMA needs a Hopper GPU or newer (compute capability >= 9.0)"
    if any(x.data_ptr() % 16 for x in tensors):
        return "TMA needs tensors whose start is 16-byte aligned"
    return None


def _flash_attention_tuned(q, k, v, out, lse, scale, causal):
    """Launch flash_attention_tma_kernel on 3-D descriptors of the contiguous q, k, v and out."""
    batch, n_heads, t_q, head_size = q.shape
    n_kv_heads, t_k = k.shape[1], k.shape[2]
    dummy = [1, 16, head_size]  # replaced per config by _tma_block_shapes

    def desc(x, heads, t):
        return TensorDescriptor(x, [batch * heads, t, head_size], [t * head_size, head_size, 1], dummy)

    def grid(meta):
        return (triton.cdiv(t_q, meta["BLOCK_M"]), batch * n_heads)

    flash_attention_tma_kernel[grid](desc(q, n_heads, t_q), desc(k, n_kv_heads, t_k), desc(v, n_kv_heads, t_k),
                                     desc(out, n_heads, t_q), lse, scale * LOG2_E, t_q, t_k, n_heads,
                                     n_heads // n_kv_heads, HEAD_DIM=head_size, CAUSAL=causal,
                                     UPCAST=interpreted() and q.dtype == torch.bfloat16,
                                     PRECISION=dot_precision(q.dtype))


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False, *, tuned: bool = True):
    """softmax(q k^T * scale) v for q (B, nh, Tq, hs), k and v (B, nkv, Tk, hs): as torch's SDPA, in Triton.

    causal: query i sits at position Tk - Tq + i and sees the keys up to it (for Tq == Tk, SDPA's
    is_causal). scale defaults to 1/sqrt(hs). Returns O (B, nh, Tq, hs) in q's dtype, and with
    return_lse also the float32 log-sum-exp (B, nh, Tq) of each row of scaled scores.
    tuned: True (the default) runs flash_attention_tma_kernel (tensor descriptors, Hopper's autotuning space)
    wherever `tma_refusal` finds nothing against it, else the readable flash_attention_kernel, which False
    always runs.
    """
    q, k, v = float_tensor("q", q, 4), float_tensor("k", k, 4), float_tensor("v", v, 4)
    batch, n_heads, t_q, head_size = check_shapes(q, k, v)
    t_k, n_kv_heads = k.shape[2], k.shape[1]
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if causal and t_q > t_k:
        raise ValueError(f"causal attention needs Tq <= Tk (each query sees the keys up to its position), "
                         f"got q with {t_q} tokens and k with {t_k}")
    scale = 1.0 / math.sqrt(head_size) if scale is None else positive_number("scale", scale)
    if not isinstance(tuned, bool):
        raise ValueError(f"tuned must be True or False, got {tuned!r}")
    out = torch.empty_like(q)
    lse = torch.empty((batch, n_heads, t_q), dtype=torch.float32, device=q.device)
    if tuned and tma_refusal(q.device, (q, k, v, out)) is None:
        _flash_attention_tuned(q, k, v, out, lse, scale, causal)
        return (out, lse) if return_lse else out

    def grid(meta):
        return (triton.cdiv(t_q, meta["BLOCK_M"]), batch * n_heads)

    flash_attention_kernel[grid](q, k, v, out, lse, scale * LOG2_E, t_q, t_k, n_heads, n_heads // n_kv_heads,
                                 *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
                                 HEAD_DIM=head_size, CAUSAL=causal,
                                 UPCAST=interpreted() and q.dtype == torch.bfloat16,
                                 PRECISION=dot_precision(q.dtype))
    return (out, lse) if return_lse else out


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """(B, nh, Tq, hs) after checking that q, k, v fit together; a ValueError naming the argument otherwise."""
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, nkv, Tk, hs), got k {tuple(k.shape)} "
                         f"and v {tuple(v.shape)}")
    batch, n_heads, t_q, head_size = q.shape
    if head_size not in HEAD_SIZES:
        raise ValueError(f"q's head size must be one of {HEAD_SIZES}, got {head_size}")
    if k.shape[0] != batch or k.shape[3] != head_size:
        raise ValueError(f"k must have q's batch and head size, (B, nkv, Tk, hs) = ({batch}, nkv, Tk, {head_size}), "
                         f"got {tuple(k.shape)}")
    if k.shape[1] == 0 or n_heads % k.shape[1]:
        raise ValueError(f"q's {n_heads} heads must be a multiple of k's {k.shape[1]} key/value heads")
    if batch == 0 or n_heads == 0 or t_q == 0 or k.shape[2] == 0:
        raise ValueError(f"q and k must not be empty, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    return batch, n_heads, t_q, head_size


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None):
    """The baseline: torch's scaled_dot_product_attention with the same layout and causal convention."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    t_q, t_k = q.shape[2], k.shape[2]
    if causal and t_q != t_k:  # SDPA's is_causal is top-left aligned; bottom-right needs an explicit mask
        mask = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
