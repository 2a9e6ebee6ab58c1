"""Caches whole prompts by their exact token list (a hash of the prompt): no partial prefix ever hits."""

FAILS = ["hit_rate"]


def hit_rate(workload, capacity):
    cached, hits, total = {}, 0, 0  # prompt -> None, least recently used first
    for prompt in workload:
        key = tuple(prompt)
        if key in cached:
            hits += len(key)
            del cached[key]
        while cached and sum(map(len, cached)) + len(key) > capacity:
            del cached[next(iter(cached))]
        if len(key) <= capacity:
            cached[key] = None
        total += len(key)
    return hits / total if total else 0.0
