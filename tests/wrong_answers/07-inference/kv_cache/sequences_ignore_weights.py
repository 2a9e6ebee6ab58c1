"""Fills the whole memory with caches, as if the weights took no room."""

FAILS = ["max_sequences"]


def max_sequences(config, memory_bytes, weights_bytes, context, dtype):
    return int(memory_bytes // kv_cache_bytes(config, context, 1, dtype))  # noqa: F821
