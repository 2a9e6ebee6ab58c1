"""Counts n_heads key/value heads: right for multi-head attention, too big for grouped-query models (Llama-3)."""

FAILS = ["kv_cache_bytes", "max_sequences"]


def kv_cache_bytes(config, tokens, batch, dtype):
    return 2 * config["n_layers"] * config["d_model"] * BYTES[dtype] * tokens * batch  # noqa: F821
