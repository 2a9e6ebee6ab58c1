"""Returns lse = log(l), forgetting the max m it was taken against: the log-sum-exp of exp(s - m), not of exp(s)."""

FAILS = ["flash_attention", "flash_attention_decode", "flash_attention_large_logits"]


def flash_attention(q, k, v, causal, block_q, block_k):
    dtype = np.promote_types(q.dtype, np.float32)  # noqa: F821
    t_q, head_size = q.shape
    t_k = k.shape[0]
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    scale = dtype.type(1 / math.sqrt(head_size))  # noqa: F821
    out = np.empty((t_q, head_size), dtype)  # noqa: F821
    lse = np.empty(t_q, dtype)  # noqa: F821
    states = {}
    for i, j, masked in tile_pairs(t_q, t_k, block_q, block_k, causal):  # noqa: F821
        rows = np.arange(i * block_q, min((i + 1) * block_q, t_q))  # noqa: F821
        cols = np.arange(j * block_k, min((j + 1) * block_k, t_k))  # noqa: F821
        scores = q[rows] @ k[cols].T * scale
        if masked:
            scores = np.where(cols[None, :] <= (t_k - t_q + rows)[:, None], scores, -np.inf)  # noqa: F821
        empty = (np.full(len(rows), -np.inf, dtype), np.zeros(len(rows), dtype),  # noqa: F821
                 np.zeros((len(rows), head_size), dtype))  # noqa: F821
        states[i] = combine(*states.get(i, empty), *tile_state(scores, v[cols]))  # noqa: F821

    for i, (m, l, acc) in states.items():  # noqa: E741
        rows = slice(i * block_q, min((i + 1) * block_q, t_q))
        out[rows] = acc / l[:, None]
        lse[rows] = np.log(l)  # noqa: F821
    return out.astype(q.dtype), lse
