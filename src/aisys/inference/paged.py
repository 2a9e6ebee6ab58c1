"""A paged KV cache's block manager: fixed-size blocks, a free list, block tables, fork with copy-on-write.

This is the bookkeeping of vLLM (Kwon et al., "Efficient Memory Management for Large Language
Model Serving with PagedAttention", SOSP 2023). The KV cache is a pool of `num_blocks` physical
blocks of `block_size` tokens each; a sequence owns a *block table*, the list of its blocks in
token order, so token t lives in block `table[t // block_size]`, slot `t % block_size`
(the layout `aisys.inference.paged_attention` reads). A sequence takes a new block only when its
last one is full, so it wastes less than one block. `fork` lets a child share its parent's blocks
(parallel sampling, beam search); a reference count per block says how many tables hold it, and
the first append into a shared, partly filled last block copies it first (copy-on-write).

Every method validates its arguments and checks that enough blocks are free before it changes
anything, so a failed call leaves the manager as it was: `OutOfBlocks` is the signal a scheduler
catches to preempt a sequence and try again.
"""

from .._validate import positive_int


# vLLM's default block size, in tokens: Kwon et al. (SOSP 2023), section 7.2 "Impact of Block Size", found 16 to
# 128 best on their ShareGPT trace and made 16 the default (vLLM's --block-size).
VLLM_BLOCK_SIZE = 16


class OutOfBlocks(RuntimeError):
    """Not enough free blocks for an operation; nothing was changed (a scheduler preempts and retries)."""

    def __init__(self, needed: int, free: int):
        super().__init__(f"out of KV cache blocks: this operation needs {needed} free blocks, {free} are free")
        self.needed, self.free = needed, free


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold `tokens` tokens of keys and values: ceil(tokens / block_size)."""
    return -(-tokens // block_size)


class BlockManager:
    """Hands out the blocks of a KV cache pool to sequences, vLLM-style.

    >>> manager = BlockManager(num_blocks=4, block_size=2)
    >>> manager.allocate(0, 3); manager.tables[0]
    [0, 1]
    >>> manager.fork(0, 1); manager.append(1)  # sequence 1's last block is shared and half full: copy it
    [(1, 2)]
    >>> manager.tables, manager.ref_counts
    ({0: [0, 1], 1: [0, 2]}, [2, 1, 1, 0])
    """

    def __init__(self, num_blocks: int, block_size: int):
        positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        # A stack: pop() hands out the most recently freed block first (its memory is the most likely
        # to be warm in a cache), and block 0 first at the start.
        self.free_blocks = list(range(num_blocks - 1, -1, -1))
        self.ref_counts = [0] * num_blocks  # how many block tables hold each block
        self.tables: dict[int, list[int]] = {}  # seq_id -> its physical blocks, in token order
        self.lengths: dict[int, int] = {}  # seq_id -> how many tokens it has stored

    @property
    def num_blocks(self) -> int:
        return len(self.ref_counts)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens: ceil(num_tokens / block_size)."""
        return blocks_for(num_tokens, self.block_size)

    # ------------------------------------------------------------------------------------ questions

    def blocks_needed(self, seq_id: int, n: int = 1) -> int:
        """Free blocks that `append(seq_id, n)` takes: new blocks for the tokens, plus one to copy a shared last
        block."""
        table, length = self.tables[self._known("seq_id", seq_id)], self.lengths[seq_id]
        positive_int("n", n)
        copy = length % self.block_size != 0 and self.ref_counts[table[-1]] > 1
        return copy + self.blocks_for(length + n) - len(table)

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_for(positive_int("num_tokens", num_tokens)) <= self.num_free_blocks

    def can_append(self, seq_id: int, n: int = 1) -> bool:
        return self.blocks_needed(seq_id, n) <= self.num_free_blocks

    # ------------------------------------------------------------------------------------ operations

    def allocate(self, seq_id: int, num_tokens: int) -> None:
        """A new sequence with `num_tokens` tokens (its prompt), in as few blocks as hold them."""
        self._new("seq_id", seq_id)
        needed = self.blocks_for(positive_int("num_tokens", num_tokens))
        self._require(needed)
        self.tables[seq_id] = [self._take() for _ in range(needed)]
        self.lengths[seq_id] = num_tokens

    def append(self, seq_id: int, n: int = 1) -> list[tuple[int, int]]:
        """Room for n more tokens of `seq_id`; returns the copies (src_block, dst_block) the caller must make first.

        A new block is taken only when the last one is full. If the last block is shared (ref
        count > 1) and partly filled, the new tokens would overwrite what a sibling reads, so the
        sequence gets a private copy: one copy event. A shared *full* block stays shared.
        """
        needed = self.blocks_needed(seq_id, n)  # validates seq_id and n
        self._require(needed)
        table, copies = self.tables[seq_id], []
        if self.lengths[seq_id] % self.block_size and self.ref_counts[table[-1]] > 1:
            shared, private = table[-1], self._take()
            self.ref_counts[shared] -= 1
            table[-1] = private
            copies.append((shared, private))
        self.lengths[seq_id] += n
        table.extend(self._take() for _ in range(self.blocks_for(self.lengths[seq_id]) - len(table)))
        return copies

    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence `child_id` sharing all of `parent_id`'s blocks (no copy, no new block)."""
        self._known("parent_id", parent_id)
        self._new("child_id", child_id)
        self.tables[child_id] = list(self.tables[parent_id])
        self.lengths[child_id] = self.lengths[parent_id]
        for block in self.tables[child_id]:
            self.ref_counts[block] += 1

    def free(self, seq_id: int) -> None:
        """Forget `seq_id`; each of its blocks returns to the free list when no other table holds it."""
        table = self.tables.pop(self._known("seq_id", seq_id))
        del self.lengths[seq_id]
        for block in reversed(table):  # reversed: the next allocation takes them back in table order
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)

    # ------------------------------------------------------------------------------------ helpers

    def _take(self) -> int:
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def _require(self, needed: int) -> None:
        if needed > self.num_free_blocks:
            raise OutOfBlocks(needed, self.num_free_blocks)

    def _known(self, name: str, seq_id) -> int:
        if seq_id not in self.tables:
            raise ValueError(f"{name} must be a sequence of this manager (one of {sorted(self.tables)}), got "
                             f"{seq_id!r}")
        return seq_id

    def _new(self, name: str, seq_id) -> int:
        if isinstance(seq_id, bool) or not isinstance(seq_id, int) or seq_id < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {seq_id!r}")
        if seq_id in self.tables:
            raise ValueError(f"{name} must be a new sequence id, but sequence {seq_id} exists (free it first)")
        return seq_id


def state(manager) -> dict:
    """The manager's bookkeeping as plain data: what the invariants are about, and what a grader compares."""
    return {"block_size": int(manager.block_size),
            "free_blocks": [int(b) for b in manager.free_blocks],
            "ref_counts": [int(c) for c in manager.ref_counts],
            "sequences": [[int(s), int(manager.lengths[s]), [int(b) for b in manager.tables[s]]]
                          for s in sorted(manager.tables)]}


class InvariantError(AssertionError):
    """A block manager's state breaks one of its invariants; the message says which and where."""


def check_invariants(manager_or_state) -> None:
    """Raise InvariantError unless: every block is free xor held; ref counts equal the tables holding each
    block; free + held = all blocks; each sequence's tokens fit its blocks with less than one block to spare."""
    s = manager_or_state if isinstance(manager_or_state, dict) else state(manager_or_state)
    num_blocks, block_size, free = len(s["ref_counts"]), s["block_size"], s["free_blocks"]
    holders = [0] * num_blocks
    for seq_id, tokens, table in s["sequences"]:
        for block in table:
            if not 0 <= block < num_blocks:
                raise InvariantError(f"sequence {seq_id}'s table {table} holds block {block}, outside "
                                     f"0..{num_blocks - 1}")
            holders[block] += 1
        if not (len(table) - 1) * block_size < tokens <= len(table) * block_size:
            raise InvariantError(
                f"sequence {seq_id} has {tokens} tokens in {len(table)} blocks of {block_size}: "
                + ("they do not fit" if tokens > len(table) * block_size
                   else "a whole block or more is wasted (a new block only when the last is full)"))
    for block in free:
        if not 0 <= block < num_blocks:
            raise InvariantError(f"the free list holds block {block}, outside 0..{num_blocks - 1}")
    free_set = set(free)  # membership below: a list would make the check quadratic in the pool
    if len(free_set) != len(free):
        raise InvariantError(f"the free list holds a block twice: {sorted(free)}")
    for block in range(num_blocks):
        if block in free_set and holders[block]:
            raise InvariantError(f"block {block} is on the free list and held by {holders[block]} block table(s)")
        if s["ref_counts"][block] != holders[block]:
            raise InvariantError(f"block {block} is held by {holders[block]} block table(s) but its ref count is "
                                 f"{s['ref_counts'][block]}")
    held = sum(h > 0 for h in holders)
    if held + len(free) != num_blocks:
        raise InvariantError(f"blocks are lost: {len(free)} free + {held} held != {num_blocks} in the pool")
