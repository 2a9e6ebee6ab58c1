"""Rounds the count of sequences to the nearest integer, counting a sequence whose cache fits only in part."""

FAILS = ["max_sequences"]


def max_sequences(config, memory_bytes, weights_bytes, context, dtype):
    return max(0, round((memory_bytes - weights_bytes) / kv_cache_bytes(config, context, 1, dtype)))  # noqa: F821
