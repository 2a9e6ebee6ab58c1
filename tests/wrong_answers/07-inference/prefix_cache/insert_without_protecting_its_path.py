"""Evicts for an insert without protecting the path it extends, which may evict the very prefix it builds on."""

FAILS = ["lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821
    def insert(self, tokens):
        tokens = tuple(tokens)
        path, matched = self._access(tokens)
        rest = tokens[matched:]
        missing = self.cached_tokens + len(rest) - self.capacity
        if rest and missing > 0:
            self.evict(missing)
        rest = rest[:self.capacity - self.cached_tokens]
        if rest:
            parent = path[-1] if path else self.root
            parent.children[rest[0]] = Node(rest, parent, self.clock)  # noqa: F821
            self.cached_tokens += len(rest)
        return len(rest)
