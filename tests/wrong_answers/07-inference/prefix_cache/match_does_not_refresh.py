"""Stamps nodes only when they are inserted: least recently *inserted* goes first, a match does not keep it."""

FAILS = ["lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821
    def _access(self, tokens):
        self.clock += 1
        return self._lookup(tokens)  # last_access keeps the time the node was created
