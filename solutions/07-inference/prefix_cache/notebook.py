# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a prefix cache as a radix tree
#
# **You will learn** how an inference server reuses the KV cache of prompts it has seen: how a
# radix tree stores many token sequences that share prefixes, each shared token once; how it finds
# the longest cached prefix of a new prompt; how it evicts least recently used sequences when
# memory runs out, without breaking the prefixes that other sequences stand on or the ones that
# running requests are using; and how to measure the result as a hit rate in tokens.
#
# Under causal attention, the keys and values of token $t$ depend only on tokens $0 \dots t$. Two
# requests that begin with the same 1,000-token system prompt therefore have the same keys and values
# for those 1,000 tokens, in every layer, and the second request can skip their prefill. SGLang's
# RadixAttention (Zheng et al., "SGLang: Efficient Execution of Structured Language Model Programs",
# 2024) keeps every cached sequence in a **radix tree**: a trie whose edges hold runs of tokens, so
# that a chain of nodes with one child each is one node. Here the tree stores token ids only; in an
# engine each node also holds the indices of the KV-cache slots of its tokens.
#
# You write the class `RadixCache` and the function `hit_rate`. The checks run your class through
# the provided driver `run_operations` on lists of operations and compare, after every operation,
# what it returned, what it evicted and what stays cached with the reference's. When grading, the
# reference (`aisys.inference.prefix_cache`) cannot be imported.

# %%
from aisys_grader import checker

check = checker("07-inference/prefix_cache", globals())

# %% [markdown]
# ## 1. The tree and its rules
#
# A `Node` holds the run of tokens on the edge from its parent (`tokens`, a tuple; the root's is
# empty), its children keyed by the first token of their edge (no two children start with the same
# token), the logical time of its last use and a lock count. The tokens from the root down to a node
# are its **sequence**. The cache holds `capacity` tokens at most, and every cached token sits on
# exactly one edge, so `cached_tokens` is the sum of the edge lengths. The rules, which the
# reference follows and the checks hold your class to:
#
# 1. **Lookup.** Walking `tokens` from the root follows the child that starts with the next token
#    and matches as many tokens of its edge as agree. If the walk stops **inside** an edge (the
#    tokens end there or differ there), **split** that node: a new node takes its place with the
#    matched part of the edge, the same `last_access` and the same `lock`, and the old node keeps
#    the rest of its edge below it. A lookup thus ends exactly at a node; the nodes it walked
#    through are its **path** and their total length is the matched length.
# 2. **Clock.** `match`, `insert` and `lock` are *accesses*: each one first adds 1 to `self.clock`
#    and sets `last_access = self.clock` on every node of its path (and `insert` on the leaf it
#    adds). `evict` and `unlock` change no times. The clock is logical, so runs are reproducible.
# 3. **Insert.** `insert(tokens)` stores the unmatched rest of `tokens` as **one new leaf** under
#    the last node of the path (under the root if nothing matched). If `cached_tokens` plus the rest
#    exceeds `capacity`, it first calls `evict` for the missing number of tokens, **with the path
#    protected** (treat its nodes as locked while evicting: they are the prefix being extended). If
#    the rest still does not fit, it stores only the first tokens of the rest that fit, possibly
#    none. It returns how many tokens it stored.
# 4. **Evict.** `evict(num_tokens)` removes **whole leaves**, one at a time, always the unlocked
#    leaf (`lock == 0`, never the root) with the smallest `last_access`, until at least
#    `num_tokens` tokens are freed or no leaf can go. It appends each removed leaf's sequence to
#    `self.evicted` and returns the number of tokens freed. A parent left without children is now a
#    leaf and may go next; nodes are never merged back together. Inner nodes are never evicted:
#    they are the prefix of something still cached. (Two leaves never have the same `last_access`:
#    an access stamps a single path from the root.)
# 5. **Locks.** A running request must not lose its prefix. `lock(tokens)` is an access (a lookup,
#    stamped) that adds 1 to `lock` on every node of the path, and returns the matched length $n$.
#    `unlock(prefix)` subtracts 1 along the path of `prefix`, which is `tokens[:n]` of an earlier
#    `lock`; it walks without splitting, and that path ends at a node, since the lock split there.

# %%
class Node:
    """A radix tree node: the tokens on the edge from its parent, its children, last use and lock count."""

    def __init__(self, tokens: tuple, parent, last_access: int = 0, lock: int = 0):
        self.tokens = tokens  # this edge's token ids; () for the root
        self.parent = parent  # None for the root
        self.children = {}  # first token of the child's edge -> child
        self.last_access = last_access
        self.lock = lock

    def sequence(self) -> list:
        """The token ids from the root to the end of this node."""
        runs, node = [], self
        while node is not None:
            runs.append(node.tokens)
            node = node.parent
        return [token for run in reversed(runs) for token in run]


# %% [markdown]
# Write the methods of `RadixCache` below, in the order of the rules. `__init__` and `nodes` are
# given. `_lookup` returns the path (a list of nodes, without the root) and the matched length,
# splitting as rule 1 says; `_split(node, at)` cuts `node`'s edge after `at` tokens and returns
# the new upper node. `tokens` arrive as a list of ints: turn them into a tuple to compare them with
# edges. A suggestion: let `match`, `insert` and `lock` share one small method for rule 2.

# %% tags=["solution"]
class RadixCache:
    """Cached token sequences in a radix tree of at most `capacity` tokens; LRU eviction of unlocked leaves."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.root = Node((), None)
        self.cached_tokens = 0
        self.clock = 0
        self.evicted = []  # the sequence of every evicted leaf, in the order evicted

    def nodes(self) -> list:
        """Every node but the root, parents before children."""
        found, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(node.children.values())
        return found

    def _split(self, node, at: int):
        """Cut node's edge after `at` tokens: a new upper node takes its place; return it."""
        ### BEGIN SOLUTION
        upper = Node(node.tokens[:at], node.parent, node.last_access, node.lock)
        node.parent.children[upper.tokens[0]] = upper
        node.tokens, node.parent = node.tokens[at:], upper
        upper.children[node.tokens[0]] = node
        return upper
        ### END SOLUTION

    def _lookup(self, tokens: tuple):
        """(path, matched): the nodes of the longest cached prefix of tokens, split to end at a node."""
        ### BEGIN SOLUTION
        path, matched, node = [], 0, self.root
        while matched < len(tokens) and tokens[matched] in node.children:
            node = node.children[tokens[matched]]
            common = 0
            while common < len(node.tokens) and matched + common < len(tokens) \
                    and node.tokens[common] == tokens[matched + common]:
                common += 1
            if common < len(node.tokens):  # stopped inside the edge: the upper part has no child to go on to
                node = self._split(node, common)
            path.append(node)
            matched += common
        return path, matched
        ### END SOLUTION

    def _access(self, tokens: tuple):
        """Rule 2: a lookup that counts as a use; the clock advances and stamps the path. Returns (path, matched)."""
        ### BEGIN SOLUTION
        path, matched = self._lookup(tokens)
        self.clock += 1
        for node in path:
            node.last_access = self.clock
        return path, matched
        ### END SOLUTION

    def match(self, tokens) -> int:
        """How many leading tokens of `tokens` are cached (an access)."""
        ### BEGIN SOLUTION
        return self._access(tuple(tokens))[1]
        ### END SOLUTION

    def insert(self, tokens) -> int:
        """Cache tokens (an access), evicting as needed with the path protected; return how many tokens were stored."""
        ### BEGIN SOLUTION
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
        rest = rest[:self.capacity - self.cached_tokens]
        if rest:
            parent = path[-1] if path else self.root
            parent.children[rest[0]] = Node(rest, parent, self.clock)
            self.cached_tokens += len(rest)
        return len(rest)
        ### END SOLUTION

    def evict(self, num_tokens: int) -> int:
        """Remove unlocked leaves, least recently used first, until num_tokens are freed; return the tokens freed."""
        ### BEGIN SOLUTION
        freed = 0
        while freed < num_tokens:
            leaves = [node for node in self.nodes() if not node.children and node.lock == 0]
            if not leaves:
                break
            leaf = min(leaves, key=lambda node: node.last_access)
            self.evicted.append(leaf.sequence())
            del leaf.parent.children[leaf.tokens[0]]
            self.cached_tokens -= len(leaf.tokens)
            freed += len(leaf.tokens)
        return freed
        ### END SOLUTION

    def lock(self, tokens) -> int:
        """Lock the longest cached prefix of tokens (an access); return its length n."""
        ### BEGIN SOLUTION
        path, matched = self._access(tuple(tokens))
        for node in path:
            node.lock += 1
        return matched
        ### END SOLUTION

    def unlock(self, prefix) -> None:
        """Release the lock of `prefix` (tokens[:n] of an earlier lock): subtract 1 along its path."""
        ### BEGIN SOLUTION
        prefix, node, done = tuple(prefix), self.root, 0
        while done < len(prefix):
            node = node.children[prefix[done]]
            node.lock -= 1
            done += len(node.tokens)
        ### END SOLUTION


# %% [markdown]
# The driver the checks call, a trace of it, and a picture of the tree. `run_operations` applies a list of
# operations such as `["insert", [1, 2, 3]]`, `["match", [1, 2]]`, `["lock", [1, 2, 9]]`,
# `["unlock", [1, 2]]` or `["evict", 5]` to a fresh cache and reports after each one what it
# returned, the sequences it evicted, the tokens on the tree's edges (counted from the tree, not
# from your `cached_tokens`) and the cached sequences (one per leaf, sorted).

# %%
def run_operations(ops, capacity):
    """Apply ops to a fresh RadixCache(capacity); per op: result, evicted sequences, cached tokens, sequences."""
    cache, report = RadixCache(capacity), []
    for name, argument in ops:
        before = len(cache.evicted)
        try:
            result = getattr(cache, name)(argument)
        except NotImplementedError:
            raise
        except Exception as error:  # reported to the check, which says which op raised
            report.append({"error": f"{type(error).__name__}: {error}"})
            break
        nodes = cache.nodes()
        report.append({"result": result, "evicted": [list(s) for s in cache.evicted[before:]],
                       "cached": sum(len(node.tokens) for node in nodes),
                       "sequences": sorted(node.sequence() for node in nodes if not node.children)})
    return report


def trace(ops, capacity):
    """Print what each operation returned and evicted, and what stays cached."""
    for op, step in zip(ops, run_operations(ops, capacity)):
        print(f"{op[0]:>6} {op[1]!s:<16} -> {step.get('result')!s:<4} evicted {step.get('evicted')}, "
              f"cached {step.get('sequences')}")


def show(cache, node=None, depth=0):
    """Print the tree, one node a line: its edge, last access and lock count."""
    for child in (node or cache.root).children.values():
        print("    " * depth + f"{list(child.tokens)}  (last access {child.last_access}, lock {child.lock})")
        show(cache, child, depth + 1)


# %% [markdown]
# Two requests that share a system prompt `[1, 2, 3, 4]`, then a question that ends inside an
# edge. Before you run it: how many nodes will the tree have, and which edges?

# %%
cache = RadixCache(capacity=100)
print("stored", cache.insert([1, 2, 3, 4, 10, 11]), "| stored", cache.insert([1, 2, 3, 4, 20]),
      "| match", cache.match([1, 2, 7]), "| cached", cache.cached_tokens)
show(cache)

# %% tags=["check"]
check("radix_tree")
### BEGIN HIDDEN TESTS
check("radix_tree", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Least recently used, leaves only
#
# With capacity 8, three sequences of three tokens cannot all stay. Which one does the third insert
# evict, and which does the fourth? The `match` in between is what a least-recently-used policy is
# about: a sequence used again stays.

# %%
trace([["insert", [1, 1, 1]], ["insert", [2, 2, 2]], ["match", [1, 1, 1]], ["insert", [3, 3, 3]],
       ["insert", [1, 1, 4, 4]]], capacity=8)

# %% tags=["check"]
check("lru_eviction")
### BEGIN HIDDEN TESTS
check("lru_eviction", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Locks: what a running request uses stays
#
# An engine locks the prefix a request reuses from the moment it is scheduled until it finishes:
# its KV-cache slots are being read by attention in every step. Here `[1, 2, 3]` is locked, and the
# new requests must make room elsewhere, or make do with less.

# %%
trace([["insert", [1, 2, 3]], ["lock", [1, 2, 3, 9]], ["insert", [4, 5, 6]], ["insert", [7, 8]],
       ["unlock", [1, 2, 3]], ["insert", [9, 9, 9]]], capacity=6)

# %% tags=["check"]
check("locks")
### BEGIN HIDDEN TESTS
check("locks", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Hit rate
#
# What a prefix cache buys is prefill not done. Write `hit_rate(workload, capacity)`: run the
# prompts of `workload` (lists of token ids), in order, through a fresh `RadixCache(capacity)`; for
# each one, first `match` it (the tokens found need no prefill), then `insert` it. Return the
# cached tokens found over all prompt tokens, a number in $[0, 1]$, and 0.0 for a workload without
# tokens. Count **tokens**, not requests: a request that finds 5 of its 2,000 tokens saves almost
# nothing, one that finds 1,990 saves almost all of its prefill.

# %% tags=["solution"]
def hit_rate(workload, capacity: int) -> float:
    """The share of prompt tokens found cached when each prompt in turn is matched, then inserted."""
    ### BEGIN SOLUTION
    cache, hits, total = RadixCache(capacity), 0, 0
    for prompt in workload:
        hits += cache.match(prompt)
        cache.insert(prompt)
        total += len(prompt)
    return hits / total if total else 0.0
    ### END SOLUTION


# %% tags=["check"]
check("hit_rate")
### BEGIN HIDDEN TESTS
check("hit_rate", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A chat service in miniature: 3 system prompts of 300 tokens, questions of 20 to 80 tokens, and
# half of the requests continuing an earlier conversation (its whole last prompt, an answer the
# cache never saw, and a new question). How much memory does it take to reach most of the hit
# rate that an unbounded cache gets?

# %%
import numpy as np

rng = np.random.default_rng(0)
systems, conversations, workload = [rng.integers(0, 32000, 300).tolist() for _ in range(3)], [], []
for _ in range(300):
    if conversations and rng.random() < 0.5:
        k = int(rng.integers(len(conversations)))
        conversations[k] = conversations[k] + rng.integers(0, 32000, int(rng.integers(20, 101))).tolist() \
            + rng.integers(0, 32000, int(rng.integers(20, 81))).tolist()
        workload.append(conversations[k])
    else:
        conversations.append(systems[int(rng.integers(3))] + rng.integers(0, 32000, int(rng.integers(20, 81))).tolist())
        workload.append(conversations[-1])
total = sum(len(p) for p in workload)
for capacity in (0, 1_000, 5_000, 20_000, total):
    print(f"capacity {capacity:>7,} tokens: hit rate {hit_rate(workload, capacity):.1%}")
