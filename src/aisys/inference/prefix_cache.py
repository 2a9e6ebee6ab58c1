"""Prefix caching: a radix tree over token ids with LRU eviction of leaves, and its hit rate on shared prompts.

Requests to an LLM server share prefixes: a system prompt, few-shot examples, the earlier turns of a
chat. Under causal attention a token's keys and values depend only on the tokens before it, so the
KV cache of a shared prefix is the same in every request and can be computed once. SGLang's
RadixAttention (Zheng et al. 2024) keeps the cached sequences in a radix tree (a trie whose edges
hold runs of tokens) and evicts least recently used leaves when memory runs out; a request that
is running locks the nodes it uses, so they cannot be evicted under it.

The rules of `RadixCache`, which the exercise 07-inference/prefix_cache states the same way:

- A *lookup* of `tokens` walks from the root along the edges that match. If it stops inside an
  edge, that node is split there: a new node holds the matched part of the edge (with the old
  node's last access and lock count) and the old node keeps the rest below it. A lookup therefore
  ends exactly at a node, and the nodes it passed are its *path*.
- `match`, `insert` and `lock` are accesses: each advances a logical clock by one and stamps
  every node of its path with the clock (no wall time, so a run is reproducible).
- `insert` stores the unmatched rest of `tokens` as one new leaf under the end of the path.
  When it does not fit, it first evicts (the path protected); if it still does not fit, it
  stores only the part that fits, possibly none: a cache is allowed to keep less.
- `evict(n)` removes whole unlocked leaves, least recently used first, until at least `n` tokens
  are freed or nothing more can go. A parent left childless becomes a leaf and may go next.
  Inner nodes are never evicted (they are the prefix of something still cached) and nodes are
  never merged back. Two leaves never share a timestamp: an access stamps one root-to-node path.
"""

import numpy as np

from .._validate import nonnegative_int, positive_int


class Node:
    """A node of the radix tree: the run of tokens on the edge from its parent, and its children."""

    def __init__(self, tokens: tuple, parent: "Node | None", last_access: int = 0, lock: int = 0):
        self.tokens = tokens  # the edge's token ids; () for the root only
        self.parent = parent
        self.children: dict[int, Node] = {}  # keyed by the first token of the child's edge
        self.last_access = last_access  # logical time of the last access that passed through this node
        self.lock = lock  # how many running requests use this node: > 0 means it cannot be evicted

    def sequence(self) -> list[int]:
        """The token ids from the root to the end of this node."""
        runs = []
        node = self
        while node is not None:
            runs.append(node.tokens)
            node = node.parent
        return [token for run in reversed(runs) for token in run]


def check_tokens(tokens, name: str = "tokens") -> tuple:
    """Token ids as a tuple of ints >= 0; TypeError/ValueError naming `name` otherwise."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):
            raise TypeError(f"{name} must be a 1-D sequence of integer token ids, got an array of shape "
                            f"{tokens.shape} and dtype {tokens.dtype}")
        tokens = tokens.tolist()
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(tokens).__name__}")
    tokens = tuple(tokens)
    if all(type(token) is int for token in tokens) and (not tokens or min(tokens) >= 0):
        return tokens  # the usual case, checked quickly
    return tuple(nonnegative_int(f"{name}[{i}]", token) for i, token in enumerate(tokens))


def _common_length(a: tuple, b: tuple) -> int:
    """How many leading tokens `a` and `b` share."""
    if a[:len(b)] == b[:len(a)]:  # the usual case, compared at C speed
        return min(len(a), len(b))
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


class RadixCache:
    """Cached token sequences in a radix tree of at most `capacity` tokens, LRU eviction of unlocked leaves.

    >>> cache = RadixCache(capacity=100)
    >>> cache.insert([1, 2, 3, 4]), cache.match([1, 2, 9])
    (4, 2)
    """

    def __init__(self, capacity: int):
        self.capacity = nonnegative_int("capacity", capacity)  # in tokens
        self.root = Node((), None)
        self.cached_tokens = 0  # the tokens on all edges: every cached token is stored once
        self.clock = 0
        self.evicted: list[list[int]] = []  # the sequence of every evicted leaf, in eviction order
        self._leaves: dict[Node, None] = {}  # ordered set of the leaves (the root excluded)

    # ------------------------------------------------------------------ lookups

    def _walk(self, tokens: tuple) -> tuple[list[Node], int, int]:
        """The nodes that match a prefix of `tokens`, how many tokens match, and how many of the last
        node's edge matched (its length when the match ends at the node). Changes nothing."""
        path, matched, node = [], 0, self.root
        while matched < len(tokens) and tokens[matched] in node.children:
            node = node.children[tokens[matched]]
            edge = node.tokens
            common = _common_length(edge, tokens[matched:matched + len(edge)])
            path.append(node)
            matched += common
            if common < len(edge):
                return path, matched, common
        return path, matched, len(node.tokens)

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node`'s edge after `at` tokens; the new upper node, which takes node's place, is returned."""
        upper = Node(node.tokens[:at], node.parent, node.last_access, node.lock)
        node.parent.children[upper.tokens[0]] = upper
        node.tokens, node.parent = node.tokens[at:], upper
        upper.children[node.tokens[0]] = node
        return upper

    def _lookup(self, tokens: tuple) -> tuple[list[Node], int]:
        """The path of the longest cached prefix of `tokens`, split so that it ends at a node, and its length."""
        path, matched, used = self._walk(tokens)
        if path and used < len(path[-1].tokens):
            path[-1] = self._split(path[-1], used)
        return path, matched

    def _access(self, tokens: tuple) -> tuple[list[Node], int]:
        """A lookup that counts as a use: the clock advances and every node of the path is stamped."""
        path, matched = self._lookup(tokens)
        self.clock += 1
        for node in path:
            node.last_access = self.clock
        return path, matched

    def match(self, tokens) -> int:
        """How many leading tokens of `tokens` are cached (their keys and values need no prefill)."""
        return self._access(check_tokens(tokens))[1]

    # ------------------------------------------------------------------ insertion and eviction

    def insert(self, tokens) -> int:
        """Cache `tokens`, evicting if needed; returns how many tokens were newly stored (the rest fits or not)."""
        tokens = check_tokens(tokens)
        path, matched = self._access(tokens)
        rest = tokens[matched:]
        missing = self.cached_tokens + len(rest) - self.capacity
        if rest and missing > 0:
            for node in path:  # the prefix being extended must survive its own insertion
                node.lock += 1
            self.evict(missing)
            for node in path:
                node.lock -= 1
        rest = rest[:self.capacity - self.cached_tokens]
        if rest:
            parent = path[-1] if path else self.root
            leaf = Node(rest, parent, self.clock)
            parent.children[rest[0]] = leaf
            self._leaves.pop(parent, None)
            self._leaves[leaf] = None
            self.cached_tokens += len(rest)
        return len(rest)

    def evict(self, num_tokens: int) -> int:
        """Remove least recently used unlocked leaves until `num_tokens` are freed or none is left; tokens freed."""
        nonnegative_int("num_tokens", num_tokens)
        freed = 0
        while freed < num_tokens:
            candidates = [leaf for leaf in self._leaves if leaf.lock == 0]
            if not candidates:
                break
            leaf = min(candidates, key=lambda node: node.last_access)
            self.evicted.append(leaf.sequence())
            parent = leaf.parent
            del parent.children[leaf.tokens[0]], self._leaves[leaf]
            if parent is not self.root and not parent.children:
                self._leaves[parent] = None
            self.cached_tokens -= len(leaf.tokens)
            freed += len(leaf.tokens)
        return freed

    # ------------------------------------------------------------------ locks

    def lock(self, tokens) -> int:
        """Lock the longest cached prefix of `tokens` (an access, like match) against eviction; returns its length.

        A running request locks the prefix it reuses and unlocks exactly that prefix (`tokens[:n]`) when done.
        """
        path, matched = self._access(check_tokens(tokens))
        for node in path:
            node.lock += 1
        return matched

    def unlock(self, tokens) -> None:
        """Release a lock taken by `lock`: `tokens` must be the prefix it returned the length of."""
        tokens = check_tokens(tokens)
        path, matched, used = self._walk(tokens)
        if matched < len(tokens) or (path and used < len(path[-1].tokens)) or any(n.lock == 0 for n in path):
            raise ValueError(f"tokens must be a locked prefix (tokens[:n] for an n that lock returned), got "
                             f"{list(tokens)[:20]}{' ...' if len(tokens) > 20 else ''}")
        for node in path:
            node.lock -= 1

    # ------------------------------------------------------------------ inspection

    def nodes(self) -> list[Node]:
        """Every node but the root, parents before children."""
        found, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(node.children.values())
        return found

    def sequences(self) -> list[list[int]]:
        """The cached sequences: one per leaf, sorted."""
        return sorted(leaf.sequence() for leaf in self._leaves)


def run_operations(ops, capacity: int) -> list[dict]:
    """Apply `ops` to a fresh RadixCache(capacity) and report each one (the exercise's driver, on the reference).

    Each op is [name, argument]: ["insert" | "match" | "lock" | "unlock", tokens] or ["evict", num_tokens].
    Per op: "result" (what the method returned), "evicted" (the sequences it evicted, in order),
    "cached" (tokens on the tree's edges after it) and "sequences" (the cached sequences, sorted).
    """
    cache = RadixCache(capacity)
    methods = {"insert": cache.insert, "match": cache.match, "lock": cache.lock, "unlock": cache.unlock,
               "evict": cache.evict}
    report = []
    for i, op in enumerate(ops):
        if not (isinstance(op, (list, tuple)) and len(op) == 2 and op[0] in methods):
            raise ValueError(f"ops[{i}] must be [name, argument] with name one of {', '.join(methods)}, got {op!r:.80}")
        before = len(cache.evicted)
        result = methods[op[0]](op[1])
        report.append({"result": result, "evicted": cache.evicted[before:],
                       "cached": sum(len(node.tokens) for node in cache.nodes()), "sequences": cache.sequences()})
    return report


def prefix_hits(workload, capacity: int) -> list[int]:
    """For each prompt of `workload` in turn, how many of its tokens were cached: it is matched, then inserted.

    Nothing is locked: requests run one after another.
    """
    prompts = [check_tokens(prompt, f"workload[{i}]") for i, prompt in enumerate(_check_workload(workload))]
    cache, hits = RadixCache(capacity), []
    for prompt in prompts:
        hits.append(cache.match(prompt))
        cache.insert(prompt)
    return hits


def hit_rate(workload, capacity: int) -> float:
    """The share of prompt tokens found in the cache (see `prefix_hits`); 0 for a workload without tokens.

    Counted in tokens, not requests: a hit of 900 of a 1,000-token prompt saves 90% of its prefill.
    """
    hits = prefix_hits(workload, capacity)
    total = sum(len(prompt) for prompt in workload)
    return sum(hits) / total if total else 0.0


def _check_workload(workload) -> list:
    if isinstance(workload, (str, bytes, np.ndarray)) or not hasattr(workload, "__iter__"):
        raise TypeError(f"workload must be a list of prompts (lists of token ids), got {type(workload).__name__}")
    return list(workload)


def synthetic_workload(num_requests: int, *, seed: int = 0, num_system_prompts: int = 4,
                       system_prompt_len: int = 200, num_examples: int = 3, example_len: int = 100,
                       message_len: tuple[int, int] = (10, 60), answer_len: tuple[int, int] = (20, 120),
                       follow_up: float = 0.4, vocab_size: int = 32_000) -> list[list[int]]:
    """Prompts that share prefixes the way a chat service's do, seeded.

    A new conversation starts with one of `num_system_prompts` system prompts (chosen with Zipf-like
    popularity: prompt k with weight 1/(k+1)), then one of that prompt's `num_examples` few-shot
    blocks, then a user message. With probability `follow_up` a request instead continues an earlier
    conversation: its prompt is that conversation's last prompt, the model's answer to it (tokens the
    cache never saw: only prompts are inserted) and a new message. Lengths are in tokens; the ranges
    are inclusive. Token ids are drawn uniformly below `vocab_size`, so unrelated text never matches.
    """
    positive_int("num_requests", num_requests)
    for name, value in (("num_system_prompts", num_system_prompts), ("system_prompt_len", system_prompt_len),
                        ("num_examples", num_examples), ("vocab_size", vocab_size)):
        positive_int(name, value)
    nonnegative_int("example_len", example_len)
    for name, span in (("message_len", message_len), ("answer_len", answer_len)):
        if not (len(span) == 2
                and 0 <= nonnegative_int(f"{name}[0]", span[0]) <= nonnegative_int(f"{name}[1]", span[1])):
            raise ValueError(f"{name} must be a (low, high) range of token counts with low <= high, got {span!r}")
    if not 0 <= follow_up <= 1:
        raise ValueError(f"follow_up must be a probability in [0, 1], got {follow_up!r}")

    rng = np.random.default_rng(seed)

    def text(length: int) -> list[int]:
        return rng.integers(0, vocab_size, length).tolist()

    def length(span: tuple[int, int]) -> int:
        return int(rng.integers(span[0], span[1] + 1))

    systems = [text(system_prompt_len) for _ in range(num_system_prompts)]
    examples = [[text(example_len) for _ in range(num_examples)] for _ in range(num_system_prompts)]
    popularity = 1 / np.arange(1, num_system_prompts + 1)
    conversations: list[list[int]] = []  # the last prompt of each conversation so far
    prompts = []
    for _ in range(num_requests):
        if conversations and rng.random() < follow_up:
            k = int(rng.integers(len(conversations)))
            prompt = conversations[k] + text(length(answer_len)) + text(length(message_len))
            conversations[k] = prompt
        else:
            s = int(rng.choice(num_system_prompts, p=popularity / popularity.sum()))
            prompt = systems[s] + examples[s][int(rng.integers(num_examples))] + text(length(message_len))
            conversations.append(prompt)
        prompts.append(prompt)
    return prompts
