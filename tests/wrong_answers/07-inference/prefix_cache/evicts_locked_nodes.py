"""Ignores lock counts when choosing what to evict (so an insert's own path is not protected either)."""

FAILS = ["lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821
    def evict(self, num_tokens):
        freed = 0
        while freed < num_tokens:
            leaves = [node for node in self.nodes() if not node.children]
            if not leaves:
                break
            leaf = min(leaves, key=lambda node: node.last_access)
            self.evicted.append(leaf.sequence())
            del leaf.parent.children[leaf.tokens[0]]
            self.cached_tokens -= len(leaf.tokens)
            freed += len(leaf.tokens)
        return freed
