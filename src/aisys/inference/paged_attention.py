"""Attention over a paged KV cache, written plainly: gather each sequence's blocks, then ordinary attention.

The layout is vLLM's (Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention", SOSP 2023), with one pool per tensor:

- `k_cache`, `v_cache`: (num_blocks, block_size, nkv, hs), the physical blocks of every sequence;
- `block_tables`: (B, max_blocks) integers; row b lists sequence b's blocks in order, and entries
  past the ones its context needs are ignored (engines pad them with anything);
- `context_lens`: (B,) how many tokens of keys and values sequence b has, its new token included.

Token t of sequence b lives in block `block_tables[b, t // block_size]`, slot `t % block_size`.
"""

import numpy as np

from .attention import attention
from .paged import blocks_for


def gather(cache, block_table, context_len: int):
    """(context_len, nkv, hs): one sequence's keys (or values) in token order, read through its block table."""
    block_size = cache.shape[1]
    tokens = np.arange(context_len)
    return cache[np.asarray(block_table)[tokens // block_size], tokens % block_size]


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, *, scale: float | None = None):
    """Decode attention: (B, nh, hs) queries, one new token per sequence, each over its own paged context."""
    q, k_cache, v_cache = np.asarray(q), np.asarray(k_cache), np.asarray(v_cache)
    block_tables, context_lens = np.asarray(block_tables), np.asarray(context_lens)
    check_paged_shapes(q, k_cache, v_cache, block_tables, context_lens)
    out = np.empty_like(q)
    for b in range(q.shape[0]):
        keys = gather(k_cache, block_tables[b], int(context_lens[b]))
        values = gather(v_cache, block_tables[b], int(context_lens[b]))
        out[b] = attention(q[b][None], keys, values, causal=True, scale=scale)[0]
    return out


def check_paged_shapes(q, k_cache, v_cache, block_tables, context_lens) -> None:
    """A ValueError naming the argument when the paged layout does not fit together (numpy arrays)."""
    check_layout(q, k_cache, v_cache, block_tables, context_lens)
    if not np.issubdtype(block_tables.dtype, np.integer):
        raise ValueError(f"block_tables must be integers of shape ({q.shape[0]}, max_blocks), got {block_tables.dtype}")
    if not np.issubdtype(context_lens.dtype, np.integer):
        raise ValueError(f"context_lens must be integers of shape ({q.shape[0]},), got {context_lens.dtype}")
    num_blocks, block_size = k_cache.shape[:2]
    for b in range(q.shape[0]):
        length = int(context_lens[b])
        needed = blocks_for(length, block_size)
        if length < 1:
            raise ValueError(f"context_lens[{b}] must be >= 1 (the new token's own key is cached), got {length}")
        if needed > block_tables.shape[1]:
            raise ValueError(f"context_lens[{b}] = {length} tokens needs {needed} blocks of {block_size}, "
                             f"but block_tables has room for {block_tables.shape[1]}")
        used = block_tables[b, :needed]
        if used.min() < 0 or used.max() >= num_blocks:
            raise ValueError(f"block_tables[{b}] points outside the cache's {num_blocks} blocks: {used.tolist()}")


def check_layout(q, k_cache, v_cache, block_tables, context_lens) -> None:
    """The shapes of the paged layout, without reading any values (numpy arrays or torch tensors alike)."""
    if q.ndim != 3:
        raise ValueError(f"q must have shape (B, nh, hs), got {tuple(q.shape)}")
    if k_cache.ndim != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must both have shape (num_blocks, block_size, nkv, hs), "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    n_kv_heads, head_size = k_cache.shape[2:]
    if q.shape[2] != head_size or n_kv_heads == 0 or q.shape[1] % n_kv_heads:
        raise ValueError(f"q {tuple(q.shape)} does not fit the cache {tuple(k_cache.shape)}: same head size, "
                         f"and nh a multiple of nkv")
    batch = q.shape[0]
    if block_tables.ndim != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must have shape ({batch}, max_blocks), got {tuple(block_tables.shape)}")
    if tuple(context_lens.shape) != (batch,):
        raise ValueError(f"context_lens must have shape ({batch},), got {tuple(context_lens.shape)}")
