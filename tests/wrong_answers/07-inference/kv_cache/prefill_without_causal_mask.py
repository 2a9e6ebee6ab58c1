"""Prefills without the causal mask: every prompt token sees the tokens after it, and later layers cache the leak."""

import numpy as np

FAILS = ["prefill", "decode_step"]


def prefill(net, cache, tokens):
    x = net.embed(tokens)
    positions = np.arange(cache.length, cache.length + len(x))
    for layer in range(net.config.n_layers):
        q, k, v = net.qkv(layer, x, positions)
        keys, values = cache.append(layer, k, v)
        x = net.finish(layer, x, attention.attention(q, keys, values, causal=False))  # noqa: F821
    return net.logits(x)
