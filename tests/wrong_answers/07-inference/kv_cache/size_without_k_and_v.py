"""Counts one tensor per layer where the cache holds two, K and V: half the size."""

FAILS = ["kv_cache_bytes", "max_sequences"]


def kv_cache_bytes(config, tokens, batch, dtype):
    head_size = config["d_model"] // config["n_heads"]
    return config["n_layers"] * config["n_kv_heads"] * head_size * BYTES[dtype] * tokens * batch  # noqa: F821
