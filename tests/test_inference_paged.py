"""The paged KV cache's block manager (aisys.inference.paged) and the cache it drives (aisys.inference.paged_cache)."""

import copy

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aisys.inference.model import TINY, Transformer
from aisys.inference.paged import BlockManager, InvariantError, OutOfBlocks, check_invariants, state
from aisys.inference.paged_attention import paged_attention
from aisys.inference.paged_cache import PagedKVCache, decode_step


def test_a_new_block_only_when_the_last_is_full():
    manager = BlockManager(8, 4)
    manager.allocate(0, 4)
    assert manager.tables[0] == [0] and manager.num_free_blocks == 7
    assert manager.append(0, 1) == [] and manager.tables[0] == [0, 1]
    assert manager.append(0, 3) == [] and manager.tables[0] == [0, 1]  # fills block 1 exactly
    manager.append(0, 9)
    assert manager.lengths[0] == 17 and len(manager.tables[0]) == 5
    check_invariants(manager)


def test_free_list_is_lifo_and_freed_blocks_come_back_in_table_order():
    manager = BlockManager(6, 2)
    manager.allocate(0, 5)  # blocks 0, 1, 2
    manager.allocate(1, 1)  # block 3
    manager.free(0)
    manager.allocate(2, 4)
    assert manager.tables[2] == [0, 1]


def test_fork_shares_blocks_and_copy_on_write_copies_the_partial_last_block():
    manager = BlockManager(8, 4)
    manager.allocate(0, 6)  # [0, 1], block 1 half full
    manager.fork(0, 1)
    assert manager.tables[1] == [0, 1] and manager.ref_counts[:2] == [2, 2]
    assert manager.append(1) == [(1, 2)]  # the child copies the shared half-full block
    assert manager.tables == {0: [0, 1], 1: [0, 2]} and manager.ref_counts[:3] == [2, 1, 1]
    assert manager.append(0) == []  # the parent now owns block 1 alone: no copy
    check_invariants(manager)


def test_a_shared_full_block_stays_shared():
    manager = BlockManager(8, 4)
    manager.allocate(0, 8)
    manager.fork(0, 1)
    assert manager.append(1, 2) == [] and manager.tables[1] == [0, 1, 2]
    assert manager.ref_counts[:3] == [2, 2, 1]


def test_free_keeps_blocks_another_table_holds():
    manager = BlockManager(4, 2)
    manager.allocate(0, 3)
    manager.fork(0, 1)
    manager.free(0)
    assert manager.num_free_blocks == 2 and manager.ref_counts[:2] == [1, 1]
    manager.free(1)
    assert manager.num_free_blocks == 4
    check_invariants(manager)


def test_out_of_blocks_leaves_state_exactly_unchanged():
    manager = BlockManager(3, 2)
    manager.allocate(0, 3)
    manager.fork(0, 1)
    manager.allocate(2, 2)  # the last free block
    before = copy.deepcopy(state(manager))
    for call in (lambda: manager.append(1), lambda: manager.append(2), lambda: manager.allocate(3, 1)):
        with pytest.raises(OutOfBlocks, match="needs 1 free blocks, 0 are free"):
            call()
        assert state(manager) == before
    assert not manager.can_append(1) and manager.can_append(0) is False and not manager.can_allocate(1)


def test_can_append_and_blocks_needed_count_the_copy():
    manager = BlockManager(8, 4)
    manager.allocate(0, 5)
    manager.fork(0, 1)
    assert manager.blocks_needed(1, 3) == 1  # the copy; the 3 tokens fit the copied block
    assert manager.blocks_needed(1, 4) == 2
    assert manager.can_append(1, 3 + 4 * 5) and not manager.can_append(1, 3 + 4 * 5 + 1)  # 6 free: the copy + 5


@pytest.mark.parametrize("call, match", [
    (lambda m: BlockManager(4, 0), "block_size must be an integer >= 1, got 0"),
    (lambda m: BlockManager(0, 4), "num_blocks must be an integer >= 1"),
    (lambda m: BlockManager(4, 2.0), "block_size must be an integer"),
    (lambda m: m.append(9), r"seq_id must be a sequence of this manager \(one of \[0, 1\]\), got 9"),
    (lambda m: m.free(9), "seq_id must be a sequence"),
    (lambda m: m.fork(9, 3), "parent_id must be a sequence of this manager"),
    (lambda m: m.fork(0, 1), "child_id must be a new sequence id, but sequence 1 exists"),
    (lambda m: m.fork(0, -1), "child_id must be an integer >= 0"),
    (lambda m: m.allocate(0, 2), "seq_id must be a new sequence id"),
    (lambda m: m.allocate(5, 0), "num_tokens must be an integer >= 1, got 0"),
    (lambda m: m.allocate("a", 1), "seq_id must be an integer >= 0, got 'a'"),
    (lambda m: m.append(0, 0), "n must be an integer >= 1, got 0"),
    (lambda m: m.append(0, True), "n must be an integer >= 1"),
])
def test_bad_input_is_named_and_changes_nothing(call, match):
    manager = BlockManager(6, 2)
    manager.allocate(0, 3)
    manager.fork(0, 1)
    before = copy.deepcopy(state(manager))
    with pytest.raises(ValueError, match=match):
        call(manager)
    assert state(manager) == before


def test_a_freed_sequence_is_unknown():
    manager = BlockManager(6, 2)
    manager.allocate(0, 3)
    manager.free(0)
    for call in (lambda: manager.append(0), lambda: manager.fork(0, 1), lambda: manager.free(0)):
        with pytest.raises(ValueError, match=r"must be a sequence of this manager \(one of \[\]\), got 0"):
            call()


@pytest.mark.parametrize("mutate, match", [
    (lambda s: s["ref_counts"].__setitem__(0, 1), "held by 2 block table.* ref count is 1"),
    (lambda s: s["free_blocks"].append(0), "block 0 is on the free list and held"),
    (lambda s: s["free_blocks"].pop(), "blocks are lost"),
    (lambda s: s["free_blocks"].append(s["free_blocks"][0]), "free list holds a block twice"),
    (lambda s: s["sequences"][0][2].append(s["free_blocks"].pop()), "a whole block or more is wasted"),
    (lambda s: s["sequences"][0].__setitem__(1, 9), "they do not fit"),
    (lambda s: s["sequences"][0][2].__setitem__(0, 99), "outside"),
])
def test_check_invariants_names_each_broken_invariant(mutate, match):
    manager = BlockManager(6, 2)
    manager.allocate(0, 3)
    manager.fork(0, 1)
    s = state(manager)
    check_invariants(s)
    mutate(s)
    with pytest.raises(InvariantError, match=match):
        check_invariants(s)


class ManagerMachine(RuleBasedStateMachine):
    """Random allocate / append / fork / free, with the invariants after every step, and contents tracked:
    each token's K/V is a unique tag written through the cache, so a copy-on-write that loses or
    overwrites a sibling's data shows up as a wrong tag."""

    def __init__(self):
        super().__init__()
        self.manager = BlockManager(12, 3)
        self.cache = PagedKVCache(self.manager, n_layers=1, n_kv_heads=1, head_size=1, dtype="int64")
        self.history: dict[int, list[int]] = {}
        self.next_id = self.next_tag = 0

    def _write(self, seq_id: int, n: int) -> None:
        tags = np.arange(self.next_tag, self.next_tag + n)
        self.next_tag += n
        slots = self.cache.append(seq_id, n)
        self.cache.write(0, slots, tags[:, None, None], tags[:, None, None])
        self.history.setdefault(seq_id, []).extend(tags.tolist())

    def _attempt(self, operation) -> bool:
        before = copy.deepcopy(state(self.manager))
        try:
            operation()
            return True
        except OutOfBlocks:
            assert state(self.manager) == before
            return False

    @rule(n=st.integers(1, 8))
    def allocate(self, n):
        seq_id = self.next_id
        if self._attempt(lambda: self._write(seq_id, n)):
            self.next_id += 1

    @precondition(lambda self: self.history)
    @rule(data=st.data(), n=st.integers(1, 4))
    def append(self, data, n):
        self._attempt(lambda: self._write(data.draw(st.sampled_from(sorted(self.history))), n))

    @precondition(lambda self: self.history)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.history)))
        self.cache.fork(parent, self.next_id)
        self.history[self.next_id] = list(self.history[parent])
        self.next_id += 1

    @precondition(lambda self: self.history)
    @rule(data=st.data())
    def free(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.history)))
        self.cache.free(seq_id)
        del self.history[seq_id]

    @invariant()
    def invariants_hold(self):
        check_invariants(self.manager)

    @invariant()
    def contents_survive(self):
        for seq_id, tags in self.history.items():
            table = np.array(self.manager.tables[seq_id])
            t = np.arange(len(tags))
            assert self.cache.k[0, table[t // 3], t % 3, 0, 0].tolist() == tags


TestManagerMachine = ManagerMachine.TestCase
TestManagerMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_paged_attention_over_the_cache_equals_dense_attention_for_ragged_batches():
    """The cache's block tables feed the foundation's paged_attention; it matches forward on each sequence."""
    model = Transformer(seed=3)
    cache = PagedKVCache(BlockManager(40, 4), TINY.n_layers, TINY.n_kv_heads, TINY.head_dim)
    rng = np.random.default_rng(0)
    prompts = {s: rng.integers(0, TINY.vocab_size, length).tolist() for s, length in enumerate((1, 4, 5, 9))}
    fed = {s: [] for s in prompts}
    logits = {s: [] for s in prompts}

    def step(seq_ids, tokens):
        for s, token, row in zip(seq_ids, tokens, decode_step(model, cache, seq_ids, tokens, paged_attention)):
            fed[s].append(token)
            logits[s].append(row)

    for t in range(max(map(len, prompts.values()))):  # ragged prompts, one token per step
        live = [s for s in prompts if t < len(prompts[s])]
        step(live, [prompts[s][t] for s in live])
    for parent, child in ((2, 10), (2, 11), (3, 12)):  # forks: shared blocks, then copy-on-write
        cache.fork(parent, child)
        fed[child], logits[child] = list(fed[parent]), list(logits[parent])
    cache.free(0)
    del fed[0], logits[0]
    for _ in range(6):
        live = sorted(fed)
        step(live, rng.integers(0, TINY.vocab_size, len(live)).tolist())
    check_invariants(cache.manager)
    for s in fed:
        np.testing.assert_allclose(np.array(logits[s]), model.forward(fed[s]), rtol=1e-5, atol=1e-5)


def test_decode_step_rejects_mismatched_batches():
    cache = PagedKVCache(BlockManager(4, 2), 1, 1, 2)
    with pytest.raises(ValueError, match="seq_ids must be distinct"):
        decode_step(Transformer(), cache, [0, 0], [1, 2], paged_attention)


def test_the_vllm_block_size_is_the_schedulers_default():
    import inspect

    from aisys.inference.paged import VLLM_BLOCK_SIZE
    from aisys.inference.scheduler import simulate

    assert inspect.signature(simulate).parameters["block_size"].default == VLLM_BLOCK_SIZE
