"""paged_attention ignores context_lens and attends to every block of the table, padding included."""

import numpy as np

FAILS = ["paged_attention"]
_right = paged_attention  # noqa: F821 (the solution's)


def paged_attention(q, k_cache, v_cache, block_tables, context_lens):
    full = np.full(len(context_lens), block_tables.shape[1] * k_cache.shape[1])
    return _right(q, k_cache, v_cache, block_tables, full)
