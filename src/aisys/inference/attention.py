"""Softmax attention, written plainly: the ground truth every faster attention in chapter 7 is compared with.

Shapes follow CONTRIBUTING's glossary: queries `(Tq, nh, hs)`, keys and values `(Tk, nkv, hs)`.
With grouped-query attention (Ainslie et al. 2023) `nh` is a multiple of `nkv`, and query head h
reads key/value head `h // (nh // nkv)`; `nkv == nh` is ordinary multi-head attention.
"""

import math

import numpy as np


def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, after subtracting the maximum so that no exp overflows."""
    x = np.asarray(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, *, causal: bool = True, scale: float | None = None):
    """softmax(q k^T * scale) v for every query head; returns `(Tq, nh, hs)` in q's dtype.

    causal: the queries are the *last* Tq of the Tk positions (query i sits at position
    Tk - Tq + i) and each sees the keys at its own position and before. This one rule covers
    prefill (Tq == Tk), decode (Tq == 1: the new token sees everything) and chunked prefill.
    scale defaults to 1/sqrt(hs) (Vaswani et al. 2017). Computed in float64: a reference should
    not be the thing that rounds.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    t_q, n_heads, head_size = check_shapes(q, k, v)
    t_k, n_kv_heads = k.shape[0], k.shape[1]
    if causal and t_q > t_k:
        raise ValueError(f"causal attention needs at least as many keys as queries: q has {t_q} tokens, k has {t_k}")
    scale = 1.0 / math.sqrt(head_size) if scale is None else float(scale)
    group = n_heads // n_kv_heads
    # (Tq, nkv, group, hs): the query heads that share one key/value head side by side.
    qg = q.astype(np.float64).reshape(t_q, n_kv_heads, group, head_size)
    scores = np.einsum("qkgd,tkd->kgqt", qg, k.astype(np.float64)) * scale  # (nkv, group, Tq, Tk)
    if causal:
        scores = np.where(causal_mask(t_q, t_k), scores, -np.inf)
    out = np.einsum("kgqt,tkd->qkgd", softmax(scores), v.astype(np.float64))
    return out.reshape(t_q, n_heads, head_size).astype(q.dtype)


def causal_mask(t_q: int, t_k: int):
    """(Tq, Tk) booleans, True where query i (at position Tk - Tq + i) may see key j."""
    return np.arange(t_k)[None, :] <= np.arange(t_k - t_q, t_k)[:, None]


def check_shapes(q, k, v) -> tuple[int, int, int]:
    """(Tq, nh, hs) after checking that q, k, v fit together; a ValueError naming the argument otherwise."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 3:
            raise ValueError(f"{name} must have 3 dimensions (tokens, heads, head size), got shape {x.shape}")
    if k.shape[0] == 0:
        raise ValueError("k must hold at least one token: attention over nothing is undefined")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {k.shape} and v {v.shape}")
    t_q, n_heads, head_size = q.shape
    if k.shape[2] != head_size:
        raise ValueError(f"q and k must have the same head size, got q {q.shape} and k {k.shape}")
    if k.shape[1] == 0 or n_heads % k.shape[1]:
        raise ValueError(f"q's {n_heads} heads must be a multiple of k's {k.shape[1]} key/value heads")
    return t_q, n_heads, head_size
