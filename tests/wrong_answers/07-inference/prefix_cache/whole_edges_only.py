"""Matches whole edges only, never splitting one: a prefix that ends or diverges inside an edge is not found."""

FAILS = ["radix_tree", "lru_eviction", "locks", "hit_rate"]


class RadixCache(RadixCache):  # noqa: F821 (the solution's class, defined before this file runs)
    def _lookup(self, tokens):
        path, matched, node = [], 0, self.root
        while matched < len(tokens) and tokens[matched] in node.children:
            child = node.children[tokens[matched]]
            if tokens[matched:matched + len(child.tokens)] != child.tokens:
                break
            node = child
            path.append(node)
            matched += len(node.tokens)
        return path, matched
