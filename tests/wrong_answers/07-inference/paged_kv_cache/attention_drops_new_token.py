"""paged_attention reads context_lens[b] - 1 tokens: it leaves out the new token's own key and value."""

import numpy as np

FAILS = ["paged_attention"]
_right = paged_attention  # noqa: F821 (the solution's)


def paged_attention(q, k_cache, v_cache, block_tables, context_lens):
    lens = np.maximum(np.asarray(context_lens) - 1, 1)
    return _right(q, k_cache, v_cache, block_tables, lens)
