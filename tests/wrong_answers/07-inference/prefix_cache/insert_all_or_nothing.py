"""Stores nothing when the rest of an insert does not fit after evicting, instead of the part that fits."""

FAILS = ["lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821
    def insert(self, tokens):
        tokens = tuple(tokens)
        path, matched = self._access(tokens)
        rest = tokens[matched:]
        missing = self.cached_tokens + len(rest) - self.capacity
        if rest and missing > 0:
            for node in path:
                node.lock += 1
            self.evict(missing)
            for node in path:
                node.lock -= 1
        if rest and self.cached_tokens + len(rest) <= self.capacity:
            parent = path[-1] if path else self.root
            parent.children[rest[0]] = Node(rest, parent, self.clock)  # noqa: F821
            self.cached_tokens += len(rest)
            return len(rest)
        return 0
