"""Counts requests that found any cached prefix over all requests, instead of cached tokens over all tokens."""

FAILS = ["hit_rate"]


def hit_rate(workload, capacity):
    cache, found = RadixCache(capacity), 0  # noqa: F821
    for prompt in workload:
        found += cache.match(prompt) > 0
        cache.insert(prompt)
    return found / len(workload) if workload else 0.0
