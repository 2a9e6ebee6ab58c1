"""Evicts the least recently used unlocked node even when it has children, and its whole subtree with it."""

FAILS = ["lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821
    def evict(self, num_tokens):
        freed = 0
        while freed < num_tokens:
            candidates = [node for node in self.nodes() if node.lock == 0]
            if not candidates:
                break
            victim = min(candidates, key=lambda node: node.last_access)  # a parent ties with its child: parent first
            stack = [victim]
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                self.cached_tokens -= len(node.tokens)
                freed += len(node.tokens)
                if not node.children:
                    self.evicted.append(node.sequence())
            del victim.parent.children[victim.tokens[0]]
        return freed
