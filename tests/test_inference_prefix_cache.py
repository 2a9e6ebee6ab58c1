"""Tests of aisys.inference.prefix_cache: the radix tree against a model made of plain sets of prefixes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisys.inference.prefix_cache import RadixCache, hit_rate, run_operations, synthetic_workload


class PrefixSetModel:
    """The same cache without a tree: every cached token is one distinct non-empty prefix.

    `prefixes` is prefix-closed; `ends` are the prefixes at which a node ends (where a lookup
    stopped or an insert ended); a leaf is an end that no cached prefix extends, and evicting it
    removes the prefixes between it and the longest end below it. Times and locks are kept per
    prefix: an access stamps every prefix it matched.
    """

    def __init__(self, capacity):
        self.capacity, self.clock = capacity, 0
        self.prefixes, self.ends, self.time, self.locks = set(), set(), {}, {}
        self.evicted = []

    def _match(self, tokens):
        tokens = tuple(tokens)
        matched = max(k for k in range(len(tokens) + 1) if k == 0 or tokens[:k] in self.prefixes)
        if matched:
            self.ends.add(tokens[:matched])
        return tokens, matched

    def _access(self, tokens):
        tokens, matched = self._match(tokens)
        self.clock += 1
        for k in range(1, matched + 1):
            self.time[tokens[:k]] = self.clock
        return tokens, matched

    def match(self, tokens):
        return self._access(tokens)[1]

    def leaves(self):
        return [end for end in self.ends if end in self.prefixes
                and not any(len(p) == len(end) + 1 and p[:-1] == end for p in self.prefixes)]

    def evict(self, num_tokens, protected=()):
        freed = 0
        while freed < num_tokens:
            leaves = [leaf for leaf in self.leaves() if self.locks.get(leaf, 0) == 0 and leaf not in protected]
            if not leaves:
                break
            times = sorted(self.time[leaf] for leaf in leaves)
            assert len(times) < 2 or times[0] < times[1], "two evictable leaves share a timestamp"
            leaf = min(leaves, key=self.time.get)
            below = max((len(end) for end in self.ends if end in self.prefixes and len(end) < len(leaf)
                         and leaf[:len(end)] == end), default=0)  # where the leaf's node starts
            for k in range(below + 1, len(leaf) + 1):
                self.prefixes.discard(leaf[:k])
            self.ends.discard(leaf)
            self.evicted.append(list(leaf))
            freed += len(leaf) - below
        return freed

    def insert(self, tokens):
        tokens, matched = self._access(tokens)
        rest = len(tokens) - matched
        if rest and len(self.prefixes) + rest > self.capacity:
            self.evict(len(self.prefixes) + rest - self.capacity, protected={tokens[:k] for k in range(matched + 1)})
        fit = min(rest, self.capacity - len(self.prefixes))
        for k in range(matched + 1, matched + fit + 1):
            self.prefixes.add(tokens[:k])
            self.time[tokens[:k]] = self.clock
        if fit:
            self.ends.add(tokens[:matched + fit])
        return fit

    def lock(self, tokens):
        tokens, matched = self._access(tokens)
        for k in range(1, matched + 1):
            self.locks[tokens[:k]] = self.locks.get(tokens[:k], 0) + 1
        return matched

    def unlock(self, tokens):
        tokens = tuple(tokens)
        for k in range(1, len(tokens) + 1):
            self.locks[tokens[:k]] -= 1

    def sequences(self):
        return sorted(list(leaf) for leaf in self.leaves())


TOKENS = st.lists(st.integers(0, 2), max_size=7)
OPS = st.lists(st.tuples(st.sampled_from(["insert", "insert", "match", "lock", "unlock", "evict"]), TOKENS,
                         st.integers(0, 6)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(OPS, st.integers(0, 14))
def test_radix_cache_agrees_with_the_prefix_set_model(ops, capacity):
    cache, model, held = RadixCache(capacity), PrefixSetModel(capacity), []
    for name, tokens, n in ops:
        if name == "evict":
            assert cache.evict(n) == model.evict(n)
        elif name == "unlock":
            if not held:
                continue
            prefix = held.pop(n % len(held))
            cache.unlock(prefix)
            model.unlock(prefix)
        else:
            got, expected = getattr(cache, name)(tokens), getattr(model, name)(tokens)
            assert got == expected, (name, tokens)
            if name == "lock":
                held.append(tokens[:got])
        assert cache.evicted == model.evicted
        assert cache.sequences() == model.sequences()
        assert cache.cached_tokens == len(model.prefixes) == sum(len(node.tokens) for node in cache.nodes())
        assert cache.cached_tokens <= capacity
        for prefix in held:  # a locked prefix is never evicted
            assert cache.match(prefix) == len(prefix) == model.match(prefix)


@settings(max_examples=200, deadline=None)
@given(st.lists(TOKENS, max_size=12), TOKENS)
def test_match_is_the_longest_common_prefix_with_a_cached_sequence(inserted, query):
    cache = RadixCache(capacity=1000)  # no eviction
    for tokens in inserted:
        cache.insert(tokens)
    longest = max([next((i for i, (a, b) in enumerate(zip(s, query)) if a != b), min(len(s), len(query)))
                   for s in inserted] + [0])
    assert cache.match(query) == longest


def edges(cache):
    return sorted(tuple(node.tokens) for node in cache.nodes())


def test_insert_that_diverges_mid_edge_splits_it():
    cache = RadixCache(100)
    cache.insert([1, 2, 3, 4])
    assert cache.insert([1, 2, 9]) == 1
    assert edges(cache) == [(1, 2), (3, 4), (9,)]
    assert cache.cached_tokens == 5


def test_match_ending_mid_edge_splits_it_and_counts_the_partial_edge():
    cache = RadixCache(100)
    cache.insert([1, 2, 3, 4])
    assert cache.match([1, 2, 3]) == 3
    assert cache.match([1, 2, 7]) == 2
    assert edges(cache) == [(1, 2), (3,), (4,)]
    assert cache.sequences() == [[1, 2, 3, 4]]


def test_inserting_a_cached_prefix_or_nothing_stores_nothing():
    cache = RadixCache(100)
    cache.insert([5, 6, 7])
    assert cache.insert([5, 6]) == 0 and cache.insert([5, 6, 7]) == 0 and cache.insert([]) == 0
    assert cache.match([]) == 0
    assert cache.cached_tokens == 3 and cache.sequences() == [[5, 6, 7]]


def test_eviction_takes_the_least_recently_used_leaf_and_match_refreshes():
    cache = RadixCache(6)
    cache.insert([1, 1])
    cache.insert([2, 2])
    cache.insert([3, 3])
    cache.match([1, 1])  # [1, 1] is now more recent than [2, 2]
    cache.insert([4, 4])
    assert cache.evicted == [[2, 2]]


def test_a_match_refreshes_only_the_part_it_matched():
    cache = RadixCache(6)
    cache.insert([1, 1])
    cache.insert([2, 2])
    cache.insert([3, 3])
    cache.match([1, 5])  # splits [1, 1]: the leaf [1] below the match keeps its old time
    cache.insert([4])
    assert cache.evicted == [[1, 1]] and cache.sequences() == [[1], [2, 2], [3, 3], [4]]


def test_inner_nodes_are_not_evicted_before_their_children():
    cache = RadixCache(5)
    cache.insert([1, 2, 3])
    cache.insert([1, 2, 3, 4, 5])  # the chain [1, 2, 3] -> [4, 5], both stamped now
    cache.insert([7])
    assert cache.evicted == [[1, 2, 3, 4, 5]]  # the leaf [4, 5] goes, freeing 2 tokens; its parent stays
    assert cache.sequences() == [[1, 2, 3], [7]]


def test_locked_prefixes_survive_and_a_full_cache_stores_what_fits():
    cache = RadixCache(4)
    cache.insert([1, 2, 3])
    assert cache.lock([1, 2, 3, 9]) == 3
    assert cache.insert([5, 6, 7]) == 1  # nothing can be evicted: only one token fits
    assert cache.evicted == [] and cache.sequences() == [[1, 2, 3], [5]]
    cache.unlock([1, 2, 3])
    assert cache.insert([5, 6, 7]) == 2 and cache.evicted == [[1, 2, 3]]


def test_capacity_zero_caches_nothing():
    assert RadixCache(0).insert([1, 2]) == 0
    assert hit_rate([[1, 2], [1, 2]], 0) == 0.0


def test_insert_protects_the_prefix_it_extends():
    cache = RadixCache(4)
    cache.insert([1, 2])
    cache.insert([3, 4])
    assert cache.insert([3, 4, 5, 6]) == 2  # [1, 2] goes; [3, 4], older than nothing else, is extended
    assert cache.evicted == [[1, 2]] and cache.sequences() == [[3, 4, 5, 6]]


def test_hit_rate_counts_tokens():
    # 3 prompts of 4 tokens; the second finds 2 cached, the third 4: 6 of 12 tokens.
    assert hit_rate([[1, 2, 3, 4], [1, 2, 7, 7], [1, 2, 3, 4]], capacity=100) == pytest.approx(0.5)
    assert hit_rate([], 10) == 0.0


def test_hit_rate_grows_with_capacity_on_shared_prompts():
    workload = synthetic_workload(200, seed=3, system_prompt_len=50, example_len=20)
    rates = [hit_rate(workload, c) for c in (0, 500, 5000, 10**6)]
    assert rates[0] == 0 and rates == sorted(rates) and rates[-1] > 0.5


def test_synthetic_workload_is_seeded_and_shares_prefixes():
    a, b = synthetic_workload(50, seed=7), synthetic_workload(50, seed=7)
    assert a == b and a != synthetic_workload(50, seed=8)
    assert len(a) == 50 and all(isinstance(t, int) for t in a[0])
    chats = synthetic_workload(30, seed=1, follow_up=1.0)  # every request after the first continues it
    assert all(chats[i + 1][:len(chats[i])] == chats[i] for i in range(29))


def test_run_operations_reports_each_op():
    report = run_operations([["insert", [1, 2, 3]], ["insert", [1, 2, 4]], ["evict", 1], ["match", [1, 2, 3]]], 10)
    assert [r["result"] for r in report] == [3, 1, 1, 2]
    assert report[2]["evicted"] == [[1, 2, 3]] and report[2]["cached"] == 3 and report[2]["sequences"] == [[1, 2, 4]]


def test_numpy_tokens_are_accepted():
    cache = RadixCache(10)
    assert cache.insert(np.array([1, 2, 3])) == 3 and cache.match([np.int64(1), 2]) == 2


@pytest.mark.parametrize("call, message", [
    (lambda: RadixCache(-1), "capacity"),
    (lambda: RadixCache(1.5), "capacity"),
    (lambda: RadixCache(4).insert([1, -2]), r"tokens\[1\]"),
    (lambda: RadixCache(4).match("abc"), "tokens"),
    (lambda: RadixCache(4).match(5), "tokens"),
    (lambda: RadixCache(4).insert(np.array([[1, 2]])), "tokens"),
    (lambda: RadixCache(4).insert([1.0]), r"tokens\[0\]"),
    (lambda: RadixCache(4).evict(-1), "num_tokens"),
    (lambda: RadixCache(4).unlock([1]), "locked prefix"),
    (lambda: hit_rate([[1], [2, -1]], 4), r"workload\[1\]\[1\]"),
    (lambda: hit_rate("abc", 4), "workload"),
    (lambda: hit_rate([[1]], -1), "capacity"),
    (lambda: synthetic_workload(0), "num_requests"),
    (lambda: synthetic_workload(5, message_len=(5, 2)), "message_len"),
    (lambda: synthetic_workload(5, follow_up=1.5), "follow_up"),
    (lambda: run_operations([["delete", [1]]], 4), r"ops\[0\]"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_unlock_of_a_prefix_ending_mid_node_is_refused():
    cache = RadixCache(10)
    cache.insert([1, 2, 3])
    cache.lock([1, 2, 3])
    with pytest.raises(ValueError, match="locked prefix"):
        cache.unlock([1, 2])
