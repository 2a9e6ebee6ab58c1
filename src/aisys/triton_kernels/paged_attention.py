"""Decode attention over a paged KV cache in Triton: one query token per sequence, keys and values read once.

The layout is vLLM's, as in `aisys.inference.paged_attention` (the numpy reference this kernel is tested
against): `k_cache`, `v_cache` (num_blocks, block_size, nkv, hs), `block_tables` (B, max_blocks),
`context_lens` (B,). Token t of sequence b is slot t % block_size of block block_tables[b, t // block_size].

Decoding is memory-bound: each step reads every cached key and value of every sequence to do 2 FLOPs
per element read (a multiply and an add, in q.k or p.v) per query head sharing it. The kernel is built so that
each byte of K and V crosses the bus once:

- **One program per (sequence, key/value head, partition).** With grouped-query attention the nh / nkv
  query heads of a group read the same keys and values; one program holds all of them, so K and V are
  read once per group, not once per query head (4x less traffic for Llama-3-8B's 32 / 8 heads).
- **Tiles gathered through the block table.** A program walks its tokens BLOCK_N at a time; each token
  looks up its block id, so one tile may span several 16-token blocks (or part of one 32-token block).
  Within a token the hs values are contiguous (256 bytes in bf16): every row load is coalesced.
- **Online softmax** (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022): a running max m and
  sum l per query head; when a tile raises the max, the sum and the accumulated p.v are rescaled by
  exp(m_old - m_new). Scores are kept in base 2 (scale * log2(e) folded in), so exp is one exp2.
- **The group on Tensor Cores.** `tl.dot` needs at least 16 rows, and a group has 1 to 8 query heads:
  the group is padded to 16 rows (padding rows load q = 0 and are never stored), as SGLang's grouped
  decode kernel does. The padding multiplies the math by 16 / group, but at 2 bytes per element the
  padded math is 16 FLOPs per byte of K/V in bf16, far left of the H100's ridge (~295 FLOP/byte): it
  costs no time, while an elementwise multiply-and-sum over a (group, BLOCK_N, hs) block would hold
  3-D tensors in registers and reduce across lanes.
- **Split-K over the context** ("flash-decoding", Dao et al. 2023; vLLM's paged_attention_v2 with
  partitions of 512 tokens): the context of each sequence is cut into partitions, one program each, so
  that a small batch, or one long sequence among short ones, still spreads over every SM. Each program
  writes its partial output (normalised by its own sum) and its log-sum-exp; the partials of a sequence
  are combined as out = sum_s w_s o_s / sum_s w_s with w_s = 2^(lse_s - max lse). The partials are
  (B, nh, partitions, hs) float32: per kv head, group x hs x 4 bytes against the partition's K and V, about
  4 / partition of the K/V bytes at hs = 128 and group 4 (under 1% at 512 tokens, 6% at 64).
- **Who combines** (`combine`): "kernel", a second kernel with one program per (sequence, query head), as
  vLLM does; or "fused", the last program of each (sequence, kv head) to finish, in the same launch (the
  semaphore fix-up of split-K and stream-K GEMMs; TensorRT-LLM's XQA decode kernel does it too). Each
  program adds 1 to a counter of its (sequence, kv head) after writing its partial; the one that brings the
  count to the number of partitions reads the group's partials back, writes the output and zeroes the
  counter. At a batch of 1 the K and V of a context of a few thousand tokens take a few microseconds of
  bandwidth, and what the second kernel adds (its launch, and the wait for the first kernel's last program
  before any of it starts) is fixed; the fused combine pays instead an atomic per program and a tail in which
  one program per (sequence, kv head) reads all its group's partials. Which wins, and with which partition
  rule, is measured (benchmarks/paged_attention.py); `COMBINE` and `PARTITION_RULE` are the defaults it chose.

Accumulation is float32 whatever the cache's dtype (float32, float16 or bfloat16); the probabilities are
rounded to the cache's dtype before the p.v product, as FlashAttention does. The result has q's dtype.
Float32 inputs are multiplied in IEEE float32 (`_tensors.dot_precision`), not the GPU's default TF32.
"""

import contextlib
import heapq
import math

import numpy as np
import torch
import triton
import triton.language as tl

from aisys._validate import positive_int
from aisys.inference.paged_attention import check_layout, check_paged_shapes

from ._tensors import FLOAT_DTYPES, dot_precision, interpreted, tensor_on_triton_device

PARTITION_SIZE = 512  # tokens per split-K program, vLLM's paged_attention_v2 choice
GRID_MIN_PARTITION = 128  # "grid" splits no finer: a program then reads 128 tokens' K and V against 1 partial row
GRID_PROGRAMS_PER_SM = 1  # "grid" splits until the first kernel has at least this many programs per SM
COMBINES = ("kernel", "fused")  # who combines a split context's partitions: a second kernel, or the last program
# The defaults, from benchmarks/paged_attention.py on an H100 (book/07-inference/paged_decode_h100.json): "grid" with
# "fused" was the fastest or within a few percent of it at every shape. At batch 1 the forced splits chose the grid's
# constants: at context 4096, fused, 64-token partitions (512 programs) ran at 0.89x SDPA's speed, their combining
# programs each reading 128 KiB of partials after the rest had finished; 128-token ones (256 programs) at 1.10x; 256
# (128 programs, 4 SMs idle) at 1.07x. At 16384, 512-token partitions (256 programs) ran at 1.03x, 256 at 0.90x.
COMBINE = "fused"
PARTITION_RULE = "grid"
COMBINE_PARTS = 16  # partitions a combining step loads at most
COMBINE_ELEMENTS = 4096  # partial values a fused combining step loads: fewer dependent trips to L2, more registers
MIN_DOT = 16  # tl.dot's smallest dimension
LOG2E = 1.4426950408889634


def _config(block_n, warps, stages):
    return triton.Config({"BLOCK_N": block_n}, num_warps=warps, num_stages=stages)


# Shared memory per program is about num_stages x BLOCK_N x hs x 2 (K and V) x 2 bytes: 192 KiB for the largest
# here at hs = 128 in bf16, within the H100's 227 KiB. More stages keep more loads in flight, which is what a
# memory-bound kernel needs; the autotuner picks per (group, head size, block size, partition, dtype).
GPU_CONFIGS = [
    _config(32, 4, 3),
    _config(64, 4, 2),
    _config(64, 4, 3),
    _config(64, 4, 4),
    _config(64, 8, 3),
    _config(128, 4, 2),
    _config(128, 8, 3),
]
INTERPRETER_CONFIGS = [_config(16, 4, 1)]  # small tiles: the tests' contexts of a few blocks still take several


def _fitting_configs(configs, named_args, **kwargs):
    """Tiles no longer than a partition: a longer tile would load tokens the program then masks off."""
    partition = {**named_args, **kwargs}["PARTITION"]  # constexprs come as keyword arguments
    return [c for c in configs if c.kwargs["BLOCK_N"] <= partition] or configs[:1]


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS,
                 key=["GROUP_PAD", "HEAD_PAD", "BLOCK_SIZE", "PARTITION", "SPLIT", "FUSED"],
                 prune_configs_by={"early_config_prune": _fitting_configs})
@triton.jit
def paged_decode_kernel(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, partial_ptr, lse_ptr, counts_ptr,
                        qk_scale, group, head_size,
                        stride_qb, stride_qh, stride_qd,
                        stride_kn, stride_ks, stride_kh, stride_kd,
                        stride_vn, stride_vs, stride_vh, stride_vd,
                        stride_tb, stride_tn,
                        stride_ob, stride_oh, stride_od,
                        stride_pb, stride_ph, stride_pp, stride_pd,
                        stride_lb, stride_lh,
                        BLOCK_SIZE: tl.constexpr, PARTITION: tl.constexpr, GROUP_PAD: tl.constexpr,
                        HEAD_PAD: tl.constexpr, SPLIT: tl.constexpr, FUSED: tl.constexpr,
                        COMBINE_GROUP: tl.constexpr, PARTS_BLOCK: tl.constexpr, UPCAST: tl.constexpr,
                        PRECISION: tl.constexpr, BLOCK_N: tl.constexpr):
    """Attention of one sequence's query group (one kv head) over one partition of its context.

    Unsplit, the partition is the whole context and the program writes the output (B, nh, hs). SPLIT: it writes
    its partial (B, nh, partitions, hs) float32 and each head's log2-sum-exp (B, nh, partitions), which
    combine_partitions_kernel combines; SPLIT and FUSED: the last program of a (sequence, kv head) to finish
    combines them itself (`_combine_if_last`), and a context of one partition writes the output directly."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    length = tl.load(lens_ptr + seq)
    start = part * PARTITION
    if start < length:  # partitions past this sequence's context (the grid is sized for the longest) do nothing
        end = tl.minimum(start + PARTITION, length)
        rows = tl.arange(0, GROUP_PAD)
        heads = kv_head * group + rows
        head_ok = rows < group
        dims = tl.arange(0, HEAD_PAD)
        dim_ok = dims < head_size
        q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :] * stride_qd,
                    mask=head_ok[:, None] & dim_ok[None, :], other=0.0)
        if UPCAST:  # Triton's interpreter multiplies bfloat16 wrongly: give it float32 (exact for bf16 values)
            q = q.to(tl.float32)
        m = tl.full([GROUP_PAD], float("-inf"), tl.float32)  # running max of the scores, base 2
        l = tl.zeros([GROUP_PAD], tl.float32)  # running sum of 2^(score - m)
        acc = tl.zeros([GROUP_PAD, HEAD_PAD], tl.float32)  # running sum of 2^(score - m) * v
        table = tables_ptr + seq * stride_tb
        for tile in range(start, end, BLOCK_N):
            tokens = tile + tl.arange(0, BLOCK_N)
            token_ok = tokens < end
            # int64: block * stride passes 2**31 elements in a cache of a few GB
            blocks = tl.load(table + (tokens // BLOCK_SIZE) * stride_tn, mask=token_ok, other=0).to(tl.int64)
            slots = tokens % BLOCK_SIZE
            kv_ok = token_ok[:, None] & dim_ok[None, :]
            k = tl.load(k_ptr + blocks[:, None] * stride_kn + slots[:, None] * stride_ks + kv_head * stride_kh
                        + dims[None, :] * stride_kd, mask=kv_ok, other=0.0)
            v = tl.load(v_ptr + blocks[:, None] * stride_vn + slots[:, None] * stride_vs + kv_head * stride_vh
                        + dims[None, :] * stride_vd, mask=kv_ok, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (GROUP_PAD, BLOCK_N)
            scores = tl.where(token_ok[None, :], scores, float("-inf"))
            # Every tile holds at least one real token, so m_new is finite and no exp2(-inf - -inf) arises.
            m_new = tl.maximum(m, tl.max(scores, axis=1))
            alpha = tl.math.exp2(m - m_new)  # rescales what was summed against the old max
            p = tl.math.exp2(scores - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m = m_new
        out = acc / l[:, None]
        rows_ok = head_ok[:, None] & dim_ok[None, :]
        # The partitions this sequence's context reaches, and no more than the grid has: a max_context_len below
        # a context (the caller's error, not checked when given) must still bring the fused counts back to zero.
        parts = tl.minimum(tl.cdiv(length, PARTITION), tl.num_programs(2))
        # Fused, a context of one partition has nothing to combine: it writes the output as an unsplit one does.
        direct = (parts == 1) if FUSED else (not SPLIT)
        if direct:
            tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh + dims[None, :] * stride_od,
                     out.to(out_ptr.dtype.element_ty), mask=rows_ok)
        else:
            tl.store(partial_ptr + seq * stride_pb + heads[:, None] * stride_ph + part * stride_pp
                     + dims[None, :] * stride_pd, out, mask=rows_ok)
            tl.store(lse_ptr + seq * stride_lb + heads * stride_lh + part, m + tl.math.log2(l), mask=head_ok)
            if FUSED:
                _combine_if_last(partial_ptr, lse_ptr, out_ptr, counts_ptr + seq * tl.num_programs(1) + kv_head,
                                 seq, kv_head, parts, group, head_size,
                                 stride_ob, stride_oh, stride_od, stride_pb, stride_ph, stride_pp, stride_pd,
                                 stride_lb, stride_lh, COMBINE_GROUP, HEAD_PAD, PARTS_BLOCK)


@triton.jit
def _combine_if_last(partial_ptr, lse_ptr, out_ptr, count_ptr, seq, kv_head, parts, group, head_size,
                     stride_ob, stride_oh, stride_od, stride_pb, stride_ph, stride_pp, stride_pd,
                     stride_lb, stride_lh,
                     COMBINE_GROUP: tl.constexpr, HEAD_PAD: tl.constexpr, PARTS_BLOCK: tl.constexpr):
    """Count this program's partial as done; the program that counts the last one combines the group's partials.

    Why the last one sees every partial (the PTX memory model): the barrier orders the stores of all this
    program's threads before the one thread that does the atomic add; the add releases them (a release is
    cumulative: it publishes what its thread has observed, here through the barrier). The adds on one counter
    form a release sequence, so the add that reads parts - 1 acquires from every earlier one: the partials its
    program loads after it (every thread: Triton hands the count out through shared memory behind a barrier)
    are the ones written. The combining program then sets the count back to 0 for the next launch, which the
    stream orders after this one (TensorRT-LLM's XQA decode kernel does the same with a wrapping atom.inc)."""
    tl.debug_barrier()
    done = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
    if done == parts - 1:
        rows = tl.arange(0, COMBINE_GROUP)
        heads = kv_head * group + tl.minimum(rows, group - 1)  # padding rows repeat the last head, never stored
        dims = tl.arange(0, HEAD_PAD)
        dim_ok = dims < head_size
        m = tl.full([COMBINE_GROUP], float("-inf"), tl.float32)
        total = tl.zeros([COMBINE_GROUP], tl.float32)
        acc = tl.zeros([COMBINE_GROUP, HEAD_PAD], tl.float32)
        for first in range(0, parts, PARTS_BLOCK):
            idx = first + tl.arange(0, PARTS_BLOCK)
            part_ok = idx < parts
            lse = tl.load(lse_ptr + seq * stride_lb + heads[:, None] * stride_lh + idx[None, :],
                          mask=part_ok[None, :], other=float("-inf"))  # (COMBINE_GROUP, PARTS_BLOCK)
            o = tl.load(partial_ptr + seq * stride_pb + heads[:, None, None] * stride_ph
                        + idx[None, :, None] * stride_pp + dims[None, None, :] * stride_pd,
                        mask=part_ok[None, :, None] & dim_ok[None, None, :], other=0.0)
            m_new = tl.maximum(m, tl.max(lse, axis=1))  # finite: every step holds at least one real partition
            alpha = tl.math.exp2(m - m_new)
            weight = tl.math.exp2(lse - m_new[:, None])  # 0 for the padding partitions (lse = -inf)
            total = total * alpha + tl.sum(weight, axis=1)
            acc = acc * alpha[:, None] + tl.sum(weight[:, :, None] * o, axis=1)
            m = m_new
        tl.store(out_ptr + seq * stride_ob + heads[:, None] * stride_oh + dims[None, :] * stride_od,
                 (acc / total[:, None]).to(out_ptr.dtype.element_ty), mask=(rows < group)[:, None] & dim_ok[None, :])
        tl.store(count_ptr, 0)


@triton.jit
def combine_partitions_kernel(partial_ptr, lse_ptr, lens_ptr, out_ptr, head_size,
                              stride_pb, stride_ph, stride_pp, stride_pd, stride_lb, stride_lh,
                              stride_ob, stride_oh, stride_od,
                              PARTITION: tl.constexpr, HEAD_PAD: tl.constexpr, PARTS_BLOCK: tl.constexpr):
    """out[seq, head] = the partials of its context's partitions, each weighted by its share 2^lse of the sum.

    PARTS_BLOCK partitions per step, loaded together: a context cut into 64 partitions takes 4 dependent
    steps of loads, not 64."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    parts = tl.cdiv(tl.load(lens_ptr + seq), PARTITION)  # only the partitions this sequence's context reaches
    dims = tl.arange(0, HEAD_PAD)
    dim_ok = dims < head_size
    m = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_PAD], tl.float32)
    for first in range(0, parts, PARTS_BLOCK):
        idx = first + tl.arange(0, PARTS_BLOCK)
        part_ok = idx < parts
        lse = tl.load(lse_ptr + seq * stride_lb + head * stride_lh + idx, mask=part_ok, other=float("-inf"))
        o = tl.load(partial_ptr + seq * stride_pb + head * stride_ph + idx[:, None] * stride_pp
                    + dims[None, :] * stride_pd, mask=part_ok[:, None] & dim_ok[None, :], other=0.0)
        m_new = tl.maximum(m, tl.max(lse, axis=0))  # finite: every step holds at least one real partition
        alpha = tl.math.exp2(m - m_new)
        weight = tl.math.exp2(lse - m_new)  # 0 for the padding partitions (lse = -inf)
        total = total * alpha + tl.sum(weight, axis=0)
        acc = acc * alpha + tl.sum(weight[:, None] * o, axis=0)
        m = m_new
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims * stride_od,
             (acc / total).to(out_ptr.dtype.element_ty), mask=dim_ok)


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, *, scale: float | None = None,
                           partition_size: int | None | str = PARTITION_RULE, combine: str = COMBINE,
                           max_context_len: int | None = None) -> torch.Tensor:
    """(B, nh, hs): attention of each sequence's one new query over its paged context, as
    `aisys.inference.paged_attention.paged_attention` computes it.

    q (B, nh, hs); k_cache, v_cache (num_blocks, block_size, nkv, hs), one float dtype for all three;
    block_tables (B, max_blocks) and context_lens (B,) int32, on the device Triton runs on here.
    scale: default 1 / sqrt(hs). partition_size: tokens per split-K program, a power of two >= 16, None
    for one program per (sequence, kv head) over its whole context, "auto" (`auto_partition_size`: 512
    tokens when the unsplit grid leaves SMs idle), or "grid" (`grid_partition_size`: the partition chosen
    from the grid and the longest context, so that a batch of 1 still fills the SMs; the default).
    combine: who combines the partitions of a split context: "kernel" (a second kernel) or "fused" (the last
    program of each sequence and kv head to finish, in the one launch; the default).
    max_context_len: at least the longest context (it sizes the grid). An engine knows it on the host; given it,
    the tensors' contents are not read back (no device-to-host copy, no wait), and only their shapes,
    dtypes and devices are checked. Left None, context_lens and block_tables are copied to the host and
    every value is checked (a synchronisation with the GPU).
    """
    _check_tensors(q, k_cache, v_cache, block_tables, context_lens)
    if combine not in COMBINES:
        raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
    if max_context_len is None:
        check_paged_shapes(q, k_cache, v_cache, block_tables.cpu().numpy(), context_lens.cpu().numpy())
        max_context_len = int(context_lens.max()) if len(context_lens) else 1
    else:
        check_layout(q, k_cache, v_cache, block_tables, context_lens)
        max_context_len = positive_int("max_context_len", max_context_len)
    batch, n_heads, head_size = q.shape
    _, block_size, n_kv_heads, _ = k_cache.shape
    if max_context_len > block_tables.shape[1] * block_size:
        raise ValueError(f"max_context_len = {max_context_len} does not fit block_tables' "
                         f"{block_tables.shape[1]} blocks of {block_size} tokens")
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}")
    if partition_size == "auto":
        partition_size = auto_partition_size(batch, n_kv_heads, _sm_count(q.device))
    elif partition_size == "grid":  # (an empty batch launches nothing: any partition will do)
        partition_size = grid_partition_size(max(batch, 1), n_kv_heads, _sm_count(q.device), max_context_len)
    parts = num_partitions(max_context_len, partition_size)
    out = torch.empty_like(q)
    if batch == 0:
        return out
    split = parts > 1
    fused = split and combine == "fused"
    # Unsplit, the one partition is the whole context: rounded up to a power of two, so that contexts of
    # similar length share one compiled kernel (the tiles stop at the context's end in any case).
    partition = partition_size if split else triton.next_power_of_2(max_context_len)
    group = n_heads // n_kv_heads
    head_pad = max(MIN_DOT, triton.next_power_of_2(head_size))
    combine_group = triton.next_power_of_2(group)
    if split:
        partials = torch.empty((batch, n_heads, parts, head_size), dtype=torch.float32, device=q.device)
        lse = torch.empty((batch, n_heads, parts), dtype=torch.float32, device=q.device)
    else:  # the first kernel writes the output itself: partials and lse are never touched
        partials, lse = out, out
    with _zeroed_counts(q.device, batch * n_kv_heads) if fused else contextlib.nullcontext(out) as counts:
        paged_decode_kernel[(batch, n_kv_heads, parts)](
            q, k_cache, v_cache, block_tables, context_lens, out, partials, lse, counts, scale * LOG2E, group,
            head_size, *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(), *out.stride(),
            *(partials.stride() if split else (0,) * 4), *(lse.stride()[:2] if split else (0, 0)),
            BLOCK_SIZE=block_size, PARTITION=partition, GROUP_PAD=max(MIN_DOT, combine_group),
            HEAD_PAD=head_pad, SPLIT=split, FUSED=fused, COMBINE_GROUP=combine_group,
            PARTS_BLOCK=min(COMBINE_PARTS, max(2, COMBINE_ELEMENTS // (combine_group * head_pad))),
            UPCAST=interpreted() and q.dtype == torch.bfloat16, PRECISION=dot_precision(q.dtype))
    if split and not fused:
        combine_partitions_kernel[(batch, n_heads)](
            partials, lse, context_lens, out, head_size, *partials.stride(), *lse.stride()[:2], *out.stride(),
            PARTITION=partition, HEAD_PAD=head_pad, PARTS_BLOCK=COMBINE_PARTS)
    return out


# The fused combine's counters, one int32 per (sequence, kv head), zero between launches (the combining program
# resets its own). They must outlive a call, so they are cached rather than allocated and zeroed per call (a
# memset is one more launch, what the fused combine saves). FlashInfer and TensorRT-LLM's XQA take such a buffer
# from the caller, who owns memory in an engine; a function called eagerly keeps it as PyTorch keeps cuBLAS's
# workspace: per (device, stream). A stream runs its launches in order, so two calls never share counts, while
# two streams may run at once and get one buffer each.
_COUNTS: dict[tuple, torch.Tensor] = {}


@contextlib.contextmanager
def _zeroed_counts(dev: torch.device, n: int):
    """At least `n` int32 counters, all zero, for one launch on the current stream of `dev`."""
    key = (dev, torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else None)
    counts = _COUNTS.get(key)
    if counts is None or counts.numel() < n:  # grown in doubling steps, so a batch that creeps up rarely allocates
        counts = _COUNTS[key] = torch.zeros(max(n, 2 * (0 if counts is None else counts.numel())),
                                            dtype=torch.int32, device=dev)
    try:
        yield counts
    except BaseException:
        # A launch that raised part-way (in the interpreter every program runs inside the call) may have left
        # counts behind: forget the buffer rather than trust it. On a GPU a fault inside the kernel is reported
        # later, but it also poisons the CUDA context, so no launch runs after it.
        _COUNTS.pop(key, None)
        raise


def auto_partition_size(batch: int, n_kv_heads: int, sms: int) -> int | None:
    """PARTITION_SIZE when one program per (sequence, kv head) would give the SMs fewer than two each, else None.

    Measured on an H200 (132 SMs) with Llama-3-8B's heads at context 4096: unsplit, a batch of 1 (8 programs)
    reads 5% of the copy bandwidth and split 20%; a batch of 64 (512 programs) reads 99% unsplit and 89%
    split, the partials and the second kernel costing more than the SMs they would fill.
    """
    return None if batch * n_kv_heads >= 2 * sms else PARTITION_SIZE


def grid_partition_size(batch: int, n_kv_heads: int, sms: int, max_context_len: int,
                        programs_per_sm: int = GRID_PROGRAMS_PER_SM) -> int | None:
    """The partition that gives the first kernel at least `programs_per_sm` programs per SM (Flash-Decoding's rule).

    None (no split) when one program per (sequence, kv head) already does; else the largest power of two
    between GRID_MIN_PARTITION and PARTITION_SIZE whose partitions reach that many programs, or
    GRID_MIN_PARTITION when none does (a short context at batch 1). At batch 1 with 8 kv heads and a context
    of 4096 on 132 SMs: 8 x 4096 / 128 = 256 programs of 128 tokens, where "auto" launches 64 of 512 and leaves
    half the SMs idle. Halving the partition doubles the programs, so the rule lands between one and two a SM:
    as many as fill the GPU, and no more partials for the combine to read than that takes.
    """
    batch, n_kv_heads, sms = (positive_int(name, value) for name, value in
                              (("batch", batch), ("n_kv_heads", n_kv_heads), ("sms", sms)))
    max_context_len = positive_int("max_context_len", max_context_len)
    wanted = programs_per_sm * sms
    if batch * n_kv_heads >= wanted:
        return None
    size = PARTITION_SIZE
    while size > GRID_MIN_PARTITION and batch * n_kv_heads * -(-max_context_len // size) < wanted:
        size //= 2
    return size


def _sm_count(dev: torch.device) -> int:
    """SMs of the GPU; in the interpreter an H100's 132, so that a CPU takes the path an H100 would."""
    return torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 132


def num_partitions(max_context_len: int, partition_size: int | None = PARTITION_SIZE) -> int:
    """How many split-K programs each (sequence, kv head) gets: enough partitions for the longest context."""
    max_context_len = positive_int("max_context_len", max_context_len)
    if partition_size is None:
        return 1
    partition_size = positive_int("partition_size", partition_size)
    if partition_size < MIN_DOT or partition_size & (partition_size - 1):
        raise ValueError(f"partition_size must be a power of two >= {MIN_DOT} (or None: no split), "
                         f"got {partition_size}")
    return -(-max_context_len // partition_size)


def program_tokens(context_lens, n_kv_heads: int, partition_size: int | None = PARTITION_SIZE) -> list[int]:
    """Tokens of K/V each program of the first kernel reads, in launch order (idle programs: 0)."""
    lens = [positive_int("context_lens[i]", int(n)) for n in np.asarray(context_lens).reshape(-1)]
    n_kv_heads = positive_int("n_kv_heads", n_kv_heads)
    if not lens:
        return []
    parts = num_partitions(max(lens), partition_size)
    size = max(lens) if parts == 1 else partition_size
    return [max(0, min(size, n - p * size)) for n in lens for _ in range(n_kv_heads) for p in range(parts)]


def sm_busy_fraction(work, sms: int) -> float:
    """Share of `sms` x the run's duration spent working, when programs of the given `work` are handed, in
    order, to whichever SM frees first (one at a time per SM; time proportional to work): 1.0 is no idle SM."""
    sms = positive_int("sms", sms)
    work = [float(w) for w in work]
    if not work or sum(work) == 0:
        raise ValueError("work must hold at least one program with work to do")
    free_at = [0.0] * sms
    for w in work:
        heapq.heappush(free_at, heapq.heappop(free_at) + w)
    return sum(work) / (sms * max(free_at))


def _check_tensors(q, k_cache, v_cache, block_tables, context_lens) -> None:
    """Kinds, dtypes and devices, each error naming the argument (shapes are check_paged_shapes' job)."""
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables),
                    ("context_lens", context_lens)):
        tensor_on_triton_device(name, x)
    if q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"q must have dtype float32, float16 or bfloat16, got {q.dtype}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
    for name, x in (("block_tables", block_tables), ("context_lens", context_lens)):
        if x.dtype != torch.int32:
            raise ValueError(f"{name} must have dtype int32, got {x.dtype}")
