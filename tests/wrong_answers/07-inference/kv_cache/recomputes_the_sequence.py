"""Keeps the tokens and recomputes the whole sequence with forward at every step: right logits, no cache used."""

FAILS = ["uses_the_cache"]

_prefill_with_cache = prefill  # noqa: F821 (the solution's)


def prefill(net, cache, tokens):
    cache.tokens = list(tokens)
    return _prefill_with_cache(net, cache, tokens)


def decode_step(net, cache, token):
    cache.tokens.append(token)
    return net.forward(cache.tokens)[-1]
