"""Attends over the cache before appending the new token's key and value: the new token cannot see itself."""

FAILS = ["decode_step"]


def decode_step(net, cache, token):
    x = net.embed([token])
    position = [cache.length]
    for layer in range(net.config.n_layers):
        q, k, v = net.qkv(layer, x, position)
        old_keys, old_values = cache.keys[layer, :cache.lengths[layer]], cache.values[layer, :cache.lengths[layer]]
        attended = attention.attention(q, old_keys, old_values, causal=True)  # noqa: F821
        cache.append(layer, k, v)
        x = net.finish(layer, x, attended)
    return net.logits(x)[0]
