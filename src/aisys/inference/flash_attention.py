"""FlashAttention's forward pass in numpy: attention in tiles with the online softmax, never holding the (Tq, Tk)
scores.

Standard attention computes S = q k^T * scale, P = softmax(S) and O = P v as three steps, and
between them the (Tq, Tk) matrices S and P go to memory and back: at T = 4096 that is 4096^2
scores per head, against 4096 x hs numbers for each of q, k, v and O. FlashAttention (Dao et
al., NeurIPS 2022; FlashAttention-2, Dao 2023) never forms them. It cuts q into tiles of
`block_q` rows (the outer loop, one GPU program each in FA-2) and k, v into tiles of `block_k`
rows (the inner loop). A q tile keeps, per row, a partial softmax state over the keys seen so far:

    m    the largest score so far,
    l    sum over those keys of exp(score - m),
    acc  sum over those keys of exp(score - m) * v  (not yet divided by l).

Two states over disjoint sets of keys combine exactly (`combine`; the online softmax of Milakov
and Gimelshein 2018, carried to the weighted sum): rescale each by exp(its m - the new m) and
add. After the last k tile, O = acc / l, and the log-sum-exp m + log(l) of each row is all the
backward pass needs to recompute P tile by tile (`flash_attention_backward`).

Causal attention uses the chapter's bottom-right convention (`attention.attention`): query i sits
at position Tk - Tq + i. A (q tile, k tile) pair whose keys all lie after every query of the tile
is skipped, a pair that straddles the diagonal is masked, the rest run unmasked
(`tile_schedule`). Scores are computed in float32 (float64 for float64 inputs), as the GPU kernels
accumulate in float32; the output is returned in q's dtype.
"""

import itertools
import math

import numpy as np

from .._validate import positive_int
from ..dtypes import bytes_per_element
from ..roofline import Cost, gemm, softmax
from .attention import check_shapes

DEFAULT_BLOCK = 64
LSE_BYTES = 4  # the log-sum-exp is kept in float32 per (query, head) for the backward pass


def tile_schedule(t_q: int, t_k: int, block_q: int, block_k: int, causal: bool = True) -> list[tuple[int, int, bool]]:
    """The (q tile, k tile, masked) triples FlashAttention computes, q tiles outer, in order.

    Non-causal: every pair, none masked. Causal (query i at position Tk - Tq + i): a k tile is
    computed only if some key in it is visible to the q tile's last query, and masked only if
    some key in it lies after the tile's first query; all later k tiles are then skipped.
    """
    t_q, t_k = positive_int("t_q", t_q), positive_int("t_k", t_k)
    block_q, block_k = positive_int("block_q", block_q), positive_int("block_k", block_k)
    if causal and t_q > t_k:
        raise ValueError(f"causal attention needs t_q <= t_k (each query sees the keys up to its position), "
                         f"got t_q={t_q}, t_k={t_k}")
    offset = t_k - t_q  # position of query 0
    pairs = []
    for i in range(math.ceil(t_q / block_q)):
        first_query = offset + i * block_q
        last_query = offset + min((i + 1) * block_q, t_q) - 1
        for j in range(math.ceil(t_k / block_k)):
            first_key, last_key = j * block_k, min((j + 1) * block_k, t_k) - 1
            if not causal:
                pairs.append((i, j, False))
            elif first_key > last_query:
                break  # this tile and every later one lie after the tile's last query
            else:
                pairs.append((i, j, last_key > first_query))
    return pairs


def tile_state(scores, v):
    """The softmax state (m, l, acc) of one tile: scores (..., rows, cols), v (..., cols, hs).

    A row whose scores are all -inf (masked) has no finite max: it gets (-inf, 0, 0), which
    `combine` then gives no weight, rather than exp(-inf - (-inf)) = NaN.
    """
    m = scores.max(axis=-1)
    p = np.exp(scores - _finite(m)[..., None])  # every exponent <= 0: no overflow
    return m, p.sum(axis=-1), p @ v


def combine(m1, l1, acc1, m2, l2, acc2):
    """The softmax state over the union of two disjoint sets of keys, from the states (m, l, acc) of each.

    m (..., rows) running maxima, l (..., rows) sums of exp(score - m), acc (..., rows, hs) the
    matching weighted sums of v. The new max is m = max(m1, m2); each side was taken against its
    own max, so it is rescaled by exp(m_side - m) <= 1, l and acc alike. Exact, in any order.
    """
    m1, l1, acc1, m2, l2, acc2 = (np.asarray(x) for x in (m1, l1, acc1, m2, l2, acc2))
    _check_state("1", m1, l1, acc1)
    _check_state("2", m2, l2, acc2)
    if m1.shape != m2.shape or acc1.shape != acc2.shape:
        raise ValueError(f"the two states must have one shape, got m1 {m1.shape}, acc1 {acc1.shape} "
                         f"and m2 {m2.shape}, acc2 {acc2.shape}")
    m = np.maximum(m1, m2)
    safe = _finite(m)  # both sides empty (-inf): exp(-inf - 0) = 0 keeps them empty
    scale1, scale2 = np.exp(m1 - safe), np.exp(m2 - safe)
    return m, scale1 * l1 + scale2 * l2, scale1[..., None] * acc1 + scale2[..., None] * acc2


def flash_attention(q, k, v, *, causal: bool = True, block_q: int = DEFAULT_BLOCK, block_k: int = DEFAULT_BLOCK,
                    scale: float | None = None):
    """softmax(q k^T * scale) v in tiles, with the online softmax: returns (out (Tq, nh, hs), lse (Tq, nh)).

    q (Tq, nh, hs), k and v (Tk, nkv, hs), grouped-query heads and the causal convention as in
    `attention.attention`, which this equals within rounding. lse is each row's log-sum-exp of
    the scaled scores (natural log), what the backward pass keeps. At most one tile of
    (block_q, block_k) scores per head exists at a time.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    t_q, n_heads, head_size = check_shapes(q, k, v)
    if t_q == 0:
        raise ValueError("q must hold at least one token")
    t_k, n_kv_heads = k.shape[:2]
    schedule = tile_schedule(t_q, t_k, block_q, block_k, causal)
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    dtype = np.promote_types(q.dtype, np.float32)  # float32 accumulators, as on a GPU; float64 stays float64
    group = n_heads // n_kv_heads
    # (nkv, group, Tq, hs): the query heads that share a key/value head side by side, as in attention.attention
    qh = (q.astype(dtype) * dtype.type(scale)).reshape(t_q, n_kv_heads, group, head_size).transpose(1, 2, 0, 3)
    kh, vh = (x.astype(dtype).transpose(1, 0, 2)[:, None] for x in (k, v))  # (nkv, 1, Tk, hs)
    out = np.empty(qh.shape, dtype)
    lse = np.empty(qh.shape[:-1], dtype)
    for i, tiles in itertools.groupby(schedule, key=lambda tile: tile[0]):
        rows = slice(i * block_q, min((i + 1) * block_q, t_q))
        q_tile = qh[:, :, rows]
        m = np.full(q_tile.shape[:-1], -np.inf, dtype)
        l = np.zeros(q_tile.shape[:-1], dtype)
        acc = np.zeros(q_tile.shape, dtype)
        for _, j, masked in tiles:
            cols = slice(j * block_k, min((j + 1) * block_k, t_k))
            scores = q_tile @ kh[:, :, cols].swapaxes(-1, -2)  # (nkv, group, rows, cols): one tile, never more
            if masked:
                positions = t_k - t_q + np.arange(rows.start, rows.stop)  # of the tile's queries
                visible = np.arange(cols.start, cols.stop)[None, :] <= positions[:, None]
                scores = np.where(visible, scores, -np.inf)
            m, l, acc = combine(m, l, acc, *tile_state(scores, vh[:, :, cols]))
        out[:, :, rows] = acc / l[..., None]  # divide once, at the end
        lse[:, :, rows] = m + np.log(l)
    return (out.transpose(2, 0, 1, 3).reshape(t_q, n_heads, head_size).astype(q.dtype),
            lse.transpose(2, 0, 1).reshape(t_q, n_heads))


def flash_attention_backward(q, k, v, out, lse, d_out, *, causal: bool = True, block_q: int = DEFAULT_BLOCK,
                             block_k: int = DEFAULT_BLOCK, scale: float | None = None):
    """Gradients (dq, dk, dv) of out = softmax(q k^T * scale) v, given d_out, from what the forward kept: out and lse.

    FlashAttention's backward (Dao et al. 2022, section 3.1 and Algorithm 4; FlashAttention-2, Algorithm 2) stores no
    (Tq, Tk) matrix. For each (q tile, k tile) pair of the forward's schedule it recomputes the scores
    S = q k^T * scale and the probabilities P = exp(S - lse), exact at once because lse holds each row's maximum
    and sum, then

        dV += P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dQ += dS K * scale,   dK += dS^T Q * scale,

    where D = rowsum(dO * O) is one number per row: the softmax's term sum_j P_j dP_j, which equals dO . o because
    o = sum_j P_j v_j. Shapes and the causal convention are `flash_attention`'s; with grouped-query attention, dk
    and dv sum over the query heads of a group. (A GPU kernel puts the k tiles outer, so that each program owns its
    dK and dV, and accumulates dQ across programs; the arithmetic is the same.)
    """
    q, k, v, out, d_out = (np.asarray(x) for x in (q, k, v, out, d_out))
    t_q, n_heads, head_size = check_shapes(q, k, v)
    for name, x in (("out", out), ("d_out", d_out)):
        if x.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {q.shape}, got {x.shape}")
    lse = np.asarray(lse)
    if lse.shape != (t_q, n_heads):
        raise ValueError(f"lse must have shape (Tq, nh) = {(t_q, n_heads)}, got {lse.shape}")
    t_k, n_kv_heads = k.shape[:2]
    schedule = tile_schedule(t_q, t_k, block_q, block_k, causal)
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    dtype = np.promote_types(q.dtype, np.float32)
    group = n_heads // n_kv_heads

    def by_group(x):  # (T, nh, ...) -> (nkv, group, T, ...), as in flash_attention
        x = x.astype(dtype).reshape(x.shape[0], n_kv_heads, group, *x.shape[2:])
        return np.moveaxis(x, 0, 2)

    qh, oh, doh, lh = by_group(q), by_group(out), by_group(d_out), by_group(lse)
    kh, vh = (x.astype(dtype).transpose(1, 0, 2)[:, None] for x in (k, v))  # (nkv, 1, Tk, hs)
    delta = (doh * oh).sum(axis=-1)  # D: (nkv, group, Tq)
    dq = np.zeros(qh.shape, dtype)
    dk, dv = (np.zeros((n_kv_heads, group, t_k, head_size), dtype) for _ in range(2))
    for i, j, masked in schedule:
        rows = slice(i * block_q, min((i + 1) * block_q, t_q))
        cols = slice(j * block_k, min((j + 1) * block_k, t_k))
        p = np.exp(qh[:, :, rows] @ kh[:, :, cols].swapaxes(-1, -2) * dtype.type(scale) - lh[:, :, rows, None])
        if masked:
            positions = t_k - t_q + np.arange(rows.start, rows.stop)
            p = np.where(np.arange(cols.start, cols.stop)[None, :] <= positions[:, None], p, 0.0)
        dv[:, :, cols] += p.swapaxes(-1, -2) @ doh[:, :, rows]
        ds = p * (doh[:, :, rows] @ vh[:, :, cols].swapaxes(-1, -2) - delta[:, :, rows, None])
        dq[:, :, rows] += ds @ kh[:, :, cols] * dtype.type(scale)
        dk[:, :, cols] += ds.swapaxes(-1, -2) @ qh[:, :, rows] * dtype.type(scale)
    dq = np.moveaxis(dq, 2, 0).reshape(t_q, n_heads, head_size)
    dk, dv = (x.sum(axis=1).transpose(1, 0, 2) for x in (dk, dv))  # the group's heads share a key/value head
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def standard_attention_cost(batch: int, n_heads: int, t: int, head_size: int, dtype: str = "bf16") -> Cost:
    """Attention as three kernels through memory: S = q k^T (written), P = softmax(S) (read, written), O = P v (read).

    Per head: two GEMMs and a softmax over (T, T), as `aisys.roofline` counts them; 4 T^2 of the
    bytes are S and P going to memory and back, against 4 T hs for q, k, v and O.
    """
    batch, n_heads = positive_int("batch", batch), positive_int("n_heads", n_heads)
    t, head_size = positive_int("t", t), positive_int("head_size", head_size)
    steps = (gemm(t, t, head_size, dtype), softmax(t, t, dtype), gemm(t, head_size, t, dtype))
    heads = batch * n_heads
    return Cost(flops=heads * sum(s.flops for s in steps), bytes=heads * sum(s.bytes for s in steps))


def flash_attention_cost(batch: int, n_heads: int, t: int, head_size: int, dtype: str = "bf16",
                         causal: bool = False) -> Cost:
    """FlashAttention's forward: 4 B nh T^2 hs FLOPs (half of that causal), q, k, v read once and O written once.

    The bytes are the minimum: K and V are read once per q tile, but the q tiles of one head run
    at about the same time and share them in L2. The softmax's exps are left out of the FLOPs,
    as the papers count (they run on the SFU, not the Tensor Cores).
    """
    batch, n_heads = positive_int("batch", batch), positive_int("n_heads", n_heads)
    t, head_size = positive_int("t", t), positive_int("head_size", head_size)
    flops = 4 * batch * n_heads * t * t * head_size
    size = bytes_per_element(dtype)
    return Cost(flops=flops / 2 if causal else flops, bytes=4 * batch * n_heads * t * head_size * size)


def scores_bytes(batch: int, n_heads: int, t: int, dtype: str = "bf16") -> int:
    """Memory standard attention needs beyond q, k, v and O: the (T, T) scores of every head."""
    batch, n_heads, t = positive_int("batch", batch), positive_int("n_heads", n_heads), positive_int("t", t)
    return int(batch * n_heads * t * t * bytes_per_element(dtype))


def flash_extra_bytes(batch: int, n_heads: int, t: int) -> int:
    """Memory FlashAttention needs beyond q, k, v and O: one float32 log-sum-exp per query and head."""
    batch, n_heads, t = positive_int("batch", batch), positive_int("n_heads", n_heads), positive_int("t", t)
    return batch * n_heads * t * LSE_BYTES


def _finite(m):
    """m with -inf replaced by 0: a stand-in max for rows that have seen no visible key."""
    return np.where(np.isneginf(m), 0.0, m)


def _check_state(side: str, m, l, acc):
    if l.shape != m.shape:
        raise ValueError(f"l{side} must have the shape of m{side} {m.shape} (one sum per row), got {l.shape}")
    if acc.ndim != m.ndim + 1 or acc.shape[:-1] != m.shape:
        raise ValueError(f"acc{side} must have shape m{side}.shape + (hs,) = {m.shape} + (hs,), got {acc.shape}")
