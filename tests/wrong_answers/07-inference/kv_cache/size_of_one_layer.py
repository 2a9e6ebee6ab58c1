"""Forgets that every layer has its own keys and values: the size of one layer's cache."""

FAILS = ["kv_cache_bytes", "max_sequences"]


def kv_cache_bytes(config, tokens, batch, dtype):
    head_size = config["d_model"] // config["n_heads"]
    return 2 * config["n_kv_heads"] * head_size * BYTES[dtype] * tokens * batch  # noqa: F821
