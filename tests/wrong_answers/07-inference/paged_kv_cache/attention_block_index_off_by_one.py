"""paged_attention finds token t's block at (t + 1) // block_size: the last token of each block reads the next block."""

import numpy as np

FAILS = ["paged_attention"]


def paged_attention(q, k_cache, v_cache, block_tables, context_lens):
    batch, n_heads, head_size = q.shape
    block_size, n_kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = np.empty_like(q)
    for b in range(batch):
        t = np.arange(context_lens[b])
        blocks = block_tables[b][np.minimum((t + 1) // block_size, block_tables.shape[1] - 1)]
        keys, values = k_cache[blocks, t % block_size], v_cache[blocks, t % block_size]
        kv_head = np.arange(n_heads) // (n_heads // n_kv_heads)
        scores = np.einsum("hd,thd->ht", q[b].astype(np.float64), keys[:, kv_head]) / np.sqrt(head_size)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[b] = np.einsum("ht,thd->hd", weights / weights.sum(axis=1, keepdims=True), values[:, kv_head])
    return out
