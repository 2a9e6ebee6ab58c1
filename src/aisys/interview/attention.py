"""Attention as interviews pose it: torch's (batch, heads, tokens, head size) layout and one KV-cache decode step,
both on top of chapter 7's reference `aisys.inference.attention.attention`."""

import numpy as np

from ..inference.attention import attention


def _array(name: str, value, ndim: int, layout: str) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim or array.dtype.kind != "f":
        raise ValueError(f"{name} must be a float array of shape {layout}, got {array.dtype} of shape {array.shape}")
    return array


def grouped_attention(q, k, v, causal: bool = False) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v for q (B, Hq, T, d), k and v (B, Hkv, S, d): the (B, Hq, T, d) float32 result.

    Grouped-query attention: Hq is a multiple of Hkv and query head h reads key/value head h // (Hq // Hkv).
    causal: the queries are the last T of the S positions, so query i sees keys j <= i + S - T (a KV-cache
    decode's convention; torch's scaled_dot_product_attention(is_causal=True) aligns the mask to the start
    instead, which differs when T < S). Computed in float64, then rounded to float32.
    """
    q, k, v = (_array(name, x, 4, "(B, heads, tokens, d)") for name, x in (("q", q), ("k", k), ("v", v)))
    if not (q.shape[0] == k.shape[0] == v.shape[0] >= 1):
        raise ValueError(f"q, k and v must have one batch size >= 1, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    heads_last = (0, 2, 1, 3)  # (B, H, T, d) <-> (B, T, H, d): chapter 7 puts the tokens first
    out = [attention(*batch, causal=bool(causal))
           for batch in zip(q.transpose(heads_last), k.transpose(heads_last), v.transpose(heads_last))]
    return np.stack(out).transpose(heads_last).astype(np.float32)


def decode_step(k_cache, v_cache, q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One decode step of one layer: append the new token's k, v (heads, d) to k_cache, v_cache (heads, t, d),
    then attend with its q (heads, d) over all t + 1 positions, itself included.

    Returns (out (heads, d), k_cache (heads, t + 1, d), v_cache (heads, t + 1, d)), float64; t may be 0.
    """
    k_cache, v_cache = (_array(name, x, 3, "(heads, t, d)") for name, x in (("k_cache", k_cache), ("v_cache", v_cache)))
    q, k, v = (_array(name, x, 2, "(heads, d)") for name, x in (("q", q), ("k", k), ("v", v)))
    if k_cache.shape != v_cache.shape or not q.shape == k.shape == v.shape == (k_cache.shape[0], k_cache.shape[2]):
        raise ValueError(f"the caches must have one shape (heads, t, d) and q, k, v the shape (heads, d), got "
                         f"k_cache {k_cache.shape}, v_cache {v_cache.shape}, q {q.shape}, k {k.shape}, v {v.shape}")
    k_cache = np.concatenate([k_cache, k[:, None]], axis=1).astype(np.float64)
    v_cache = np.concatenate([v_cache, v[:, None]], axis=1).astype(np.float64)
    tokens_first = (1, 0, 2)  # chapter 7's (tokens, heads, d)
    out = attention(q[None].astype(np.float64), k_cache.transpose(tokens_first), v_cache.transpose(tokens_first),
                    causal=False)[0]
    return out, k_cache, v_cache
