"""Gives every decoded token position 0, so RoPE rotates its query and key as if it started the sequence."""

import numpy as np

FAILS = ["decode_step"]


def decode_step(net, cache, token):
    x = net.embed([token])
    for layer in range(net.config.n_layers):
        q, k, v = net.qkv(layer, x, np.arange(1))
        keys, values = cache.append(layer, k, v)
        x = net.finish(layer, x, attention.attention(q, keys, values, causal=True))  # noqa: F821
    return net.logits(x)[0]
