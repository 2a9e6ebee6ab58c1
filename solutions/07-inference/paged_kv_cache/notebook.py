# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise ★: a paged KV cache
#
# **You will learn** how an inference server stores the keys and values of hundreds of
# sequences of unknown length without reserving memory for the longest one: the KV cache is
# cut into fixed-size **blocks**, each sequence keeps a **block table** listing its blocks in
# token order, and a block is taken from a **free list** only when the sequence's last block is
# full, so no sequence wastes more than one block. Sequences that share a prefix (parallel
# samples of one prompt, beams) **share blocks**, counted by a **reference count**, and the
# first write into a shared, partly filled block copies it first (**copy-on-write**). When the
# free list runs dry, the manager says so *before* changing anything, so a scheduler can
# preempt a sequence and try again. Then you write the attention that reads keys and values
# through the block tables, and run a small transformer on your cache.
#
# This is vLLM's design (Kwon et al., "Efficient Memory Management for Large Language Model
# Serving with PagedAttention", SOSP 2023). Its sizes: a block holds 16 tokens by default; for
# Llama-3-8B one token's keys and values take 2 x 32 layers x 8 KV heads x 128 x 2 bytes =
# 128 KiB in bf16, so a block of 16 tokens is 2 MiB, and the 64 GB an 80 GB H100 has left after
# the 16 GB of weights hold about 30,000 blocks.
#
# **Conventions.** A pool of `num_blocks` blocks of `block_size` tokens each, numbered
# `0 .. num_blocks - 1`. Token `t` of a sequence lives in block `table[t // block_size]`, slot
# `t % block_size`. Sequence ids are integers >= 0.

# %%
import numpy as np
from aisys.inference.model import TINY, Transformer
from aisys.inference.paged_cache import PagedKVCache, decode_step
from aisys_grader import checker

check = checker("07-inference/paged_kv_cache", globals())

# %% [markdown]
# ## 1. The block manager
#
# The manager is bookkeeping only: it never touches keys or values. Its state is given in
# `__init__` below; keep it in these four attributes, which the grader reads:
#
# - `free_blocks`: the free list, a stack: `pop()` hands out the block on top, `append(block)`
#   puts one back. Initially block 0 is on top, so a fresh manager hands out 0, 1, 2, ...
#   (any order is accepted; this one makes the traces easy to read, and a freed block, the one
#   most recently used, is reused first);
# - `ref_counts[block]`: how many block tables hold `block` (0 when it is free);
# - `tables[seq_id]`: the sequence's blocks in token order;
# - `lengths[seq_id]`: how many tokens it has stored.
#
# Write the four operations:
#
# - `allocate(seq_id, num_tokens)`: a new sequence with its prompt of `num_tokens >= 1` tokens,
#   in $\lceil$ `num_tokens / block_size` $\rceil$ blocks.
# - `append(seq_id, n=1)`: room for `n >= 1` more tokens; a new block only when the last one is
#   full. If the last block is **shared** (ref count > 1) and **partly filled**, the new tokens
#   would land in a block that a sibling reads: take a fresh block, replace the shared one by it
#   in this table (one reference fewer on the shared block), and return the copy
#   `[(src_block, dst_block)]` that the caller must make of the keys and values before writing;
#   return `[]` when nothing needs copying. A shared block that is *full* stays shared: nobody
#   writes into it again.
# - `fork(parent_id, child_id)`: a new sequence with the parent's tokens, sharing all its blocks
#   (one reference more on each; no block is taken).
# - `free(seq_id)`: forget the sequence; each of its blocks goes back on the free list when no
#   other table holds it any more.
#
# **Failures change nothing.** Work out first whether the call is valid and how many blocks it
# needs; only then change the state:
#
# - too few free blocks: raise `OutOfBlocks(needed, free)` (count the copy-on-write block too);
# - a `seq_id` or `parent_id` that is not a live sequence (never added, or freed), a `seq_id` or
#   `child_id` that already exists for `allocate` or `fork`, `num_tokens` or `n` below 1: raise a
#   `ValueError` whose message names the argument (the provided `_check_...` helpers do).
#
# Two small helpers are yours to write and use: `_take` and `_require`.

# %%
class OutOfBlocks(RuntimeError):
    """Not enough free blocks for an operation; nothing was changed (a scheduler preempts and retries)."""

    def __init__(self, needed: int, free: int):
        super().__init__(f"out of KV cache blocks: this operation needs {needed} free blocks, {free} are free")
        self.needed, self.free = needed, free


# %% tags=["solution"]
class BlockManager:
    """Hands out the blocks of a KV cache pool to sequences."""

    def __init__(self, num_blocks: int, block_size: int):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.block_size = block_size
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack: pop() gives block 0 first
        self.ref_counts = [0] * num_blocks  # how many block tables hold each block
        self.tables = {}  # seq_id -> list of blocks, in token order
        self.lengths = {}  # seq_id -> tokens stored

    def allocate(self, seq_id: int, num_tokens: int) -> None:
        """A new sequence of num_tokens tokens, in as few blocks as hold them."""
        ### BEGIN SOLUTION
        self._check_new("seq_id", seq_id)
        self._check_count("num_tokens", num_tokens)
        needed = self._blocks_for(num_tokens)
        self._require(needed)
        self.tables[seq_id] = [self._take() for _ in range(needed)]
        self.lengths[seq_id] = num_tokens
        ### END SOLUTION

    def append(self, seq_id: int, n: int = 1) -> list:
        """Room for n more tokens; the copies [(src_block, dst_block)] to make first (copy-on-write), or []."""
        ### BEGIN SOLUTION
        self._check_live("seq_id", seq_id)
        self._check_count("n", n)
        table, length = self.tables[seq_id], self.lengths[seq_id]
        copy = length % self.block_size != 0 and self.ref_counts[table[-1]] > 1
        self._require(copy + self._blocks_for(length + n) - len(table))
        copies = []
        if copy:
            shared, private = table[-1], self._take()
            self.ref_counts[shared] -= 1
            table[-1] = private
            copies.append((shared, private))
        self.lengths[seq_id] = length + n
        while len(table) < self._blocks_for(length + n):
            table.append(self._take())
        return copies
        ### END SOLUTION

    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence child_id sharing every block of parent_id."""
        ### BEGIN SOLUTION
        self._check_live("parent_id", parent_id)
        self._check_new("child_id", child_id)
        self.tables[child_id] = list(self.tables[parent_id])
        self.lengths[child_id] = self.lengths[parent_id]
        for block in self.tables[child_id]:
            self.ref_counts[block] += 1
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        """Forget seq_id; blocks no other table holds go back on the free list."""
        ### BEGIN SOLUTION
        self._check_live("seq_id", seq_id)
        table = self.tables.pop(seq_id)
        del self.lengths[seq_id]
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        ### END SOLUTION

    def _take(self) -> int:
        """Pop a block off the free list; this table is its only holder."""
        ### BEGIN SOLUTION
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block
        ### END SOLUTION

    def _require(self, needed: int) -> None:
        """Raise OutOfBlocks unless `needed` blocks are free."""
        ### BEGIN SOLUTION
        if needed > len(self.free_blocks):
            raise OutOfBlocks(needed, len(self.free_blocks))
        ### END SOLUTION

    # Provided: the number of blocks that hold some tokens, and the argument checks.
    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _check_live(self, name: str, seq_id) -> None:
        if seq_id not in self.tables:
            raise ValueError(f"{name} must be a live sequence (one of {sorted(self.tables)}), got {seq_id!r}")

    def _check_new(self, name: str, seq_id) -> None:
        if not isinstance(seq_id, int) or seq_id < 0 or seq_id in self.tables:
            raise ValueError(f"{name} must be a new sequence id >= 0, got {seq_id!r}")

    def _check_count(self, name: str, count) -> None:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {count!r}")


# %% [markdown]
# The grader drives your class through `run_operations`: it runs a list of operations such as
# `["allocate", 0, 5]`, `["append", 0, 1]`, `["fork", 0, 1]`, `["free", 0]` on a fresh manager
# and reports, after each one, what it returned or raised (an `OutOfBlocks` with its `needed` and
# `free`, a `ValueError` with its message) and the whole state. It compares that
# with the reference manager's, **up to the numbering of blocks** (which sequences hold how many
# blocks, which blocks they share, how many are free), and checks the invariants after every
# operation: every block is free or held, never both; a block's ref count equals the number of
# tables holding it; free + held = all blocks; and a sequence of $L$ tokens holds
# $\lceil L / \text{block\_size} \rceil$ blocks. It also writes a distinct tag for each token
# into a pool through your block tables, making the copies your `append` returns, and checks
# that every live sequence still reads its own tokens back: that is what copy-on-write protects.

# %%
def manager_state(manager) -> dict:
    """The manager's state as plain data."""
    return {"block_size": manager.block_size, "free_blocks": list(manager.free_blocks),
            "ref_counts": list(manager.ref_counts),
            "sequences": [[s, manager.lengths[s], list(manager.tables[s])] for s in sorted(manager.tables)]}


def run_operations(ops, num_blocks, block_size):
    """Run ops on a fresh BlockManager; after each, what it raised, the copies it returned, and the state."""
    manager, results = BlockManager(num_blocks, block_size), []
    for name, *args in ops:
        error, copies = None, []
        try:
            copies = getattr(manager, name)(*args) or []
        except NotImplementedError:
            raise
        except OutOfBlocks as e:
            error = ["OutOfBlocks", str(e), e.needed, e.free]
        except ValueError as e:
            error = ["ValueError", str(e)]
        except Exception as e:  # a bug: reported, not hidden
            error = [type(e).__name__, str(e)]
        results.append({"error": error, "copies": [list(c) for c in copies], "state": manager_state(manager)})
    return results


def show(manager):
    free = manager.free_blocks[::-1]
    print(f"  tables {manager.tables}  tokens {manager.lengths}  free (next first) {free}  "
          f"ref counts {manager.ref_counts}")


# %% tags=["check"]
check("allocate_and_append")
### BEGIN HIDDEN TESTS
check("allocate_and_append", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A trace: blocks of 4 tokens, a pool of 8. Sequence 0 has a prompt of 6 tokens; two samples
# are forked from it. The first append into the shared half-full block copies it.

# %%
manager = BlockManager(num_blocks=8, block_size=4)
for op in (["allocate", 0, 6], ["fork", 0, 1], ["fork", 0, 2], ["append", 1, 1], ["append", 2, 3],
           ["append", 0, 1], ["free", 0]):
    result = getattr(manager, op[0])(*op[1:])
    print(op, "->", result)
    show(manager)

# %% tags=["check"]
check("fork_and_copy_on_write")
### BEGIN HIDDEN TESTS
check("fork_and_copy_on_write", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("out_of_blocks")
### BEGIN HIDDEN TESTS
check("out_of_blocks", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bad_input")
### BEGIN HIDDEN TESTS
check("bad_input", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Finally, long random runs: hundreds of operations on small pools, where forks, copies,
# frees and running out of blocks interleave. When one goes wrong, the message gives the
# shortest list of operations found that still goes wrong: paste it into `run_operations` or
# the trace cell above to watch it happen.

# %% tags=["check"]
check("random_operations")
### BEGIN HIDDEN TESTS
check("random_operations", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Attention through the block tables
#
# At each decoding step every sequence of the batch has one new query, `q` of shape
# (B, nh, hs), and its keys and values, the new token's included, in the pools `k_cache` and
# `v_cache` of shape (num_blocks, block_size, nkv, hs). Row b of `block_tables` (B, max_blocks)
# lists sequence b's blocks; entries past the $\lceil$ `context_lens[b] / block_size` $\rceil$
# it needs are padding, holding anything. Write `paged_attention`: for each sequence, read its
# `context_lens[b]` keys and values in token order through its table, then
# $\text{softmax}(q k^\top / \sqrt{hs})\, v$ per query head. With grouped-query attention
# (nh a multiple of nkv), query head h reads key/value head `h // (nh // nkv)`. Return (B, nh, hs)
# in q's dtype (compute in float64 or float32, as you like).
#
# This numpy version gathers each sequence's keys into a contiguous array first, which a GPU
# kernel must not do (it would copy the whole cache every step): vLLM's kernel reads each
# block where it lies, one thread block per (sequence, head), which the gather here describes.

# %% tags=["solution"]
def paged_attention(q, k_cache, v_cache, block_tables, context_lens):
    """Decode attention (B, nh, hs): each sequence's query over its context_lens[b] keys, read through its block
    table."""
    ### BEGIN SOLUTION
    batch, n_heads, head_size = q.shape
    block_size, n_kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = np.empty_like(q)
    for b in range(batch):
        t = np.arange(context_lens[b])
        blocks, offsets = block_tables[b][t // block_size], t % block_size
        keys = k_cache[blocks, offsets].astype(np.float64)  # (T, nkv, hs)
        values = v_cache[blocks, offsets].astype(np.float64)
        kv_head = np.arange(n_heads) // (n_heads // n_kv_heads)
        scores = np.einsum("hd,thd->ht", q[b].astype(np.float64), keys[:, kv_head]) / np.sqrt(head_size)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        out[b] = np.einsum("ht,thd->hd", weights, values[:, kv_head])
    return out
    ### END SOLUTION


# %% tags=["check"]
check("paged_attention")
### BEGIN HIDDEN TESTS
check("paged_attention", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. A transformer on your paged cache
#
# `PagedKVCache` (in `aisys.inference.paged_cache`) owns one K and one V pool per layer and asks
# *your* manager where each token goes, making the copies your `append` returns in every layer;
# `decode_step` feeds one token to each sequence of a batch and attends with *your*
# `paged_attention`. Below, the tiny model of this chapter reads three prompts of different
# lengths (one token per step, for simplicity), forks two samples from the longest, and
# decodes all four together. Each sequence's logits must equal those of `model.forward`,
# which recomputes the whole sequence without any cache.

# %%
model = Transformer(TINY, seed=0)
manager = BlockManager(num_blocks=24, block_size=4)
cache = PagedKVCache(manager, TINY.n_layers, TINY.n_kv_heads, TINY.head_dim)
rng = np.random.default_rng(0)
fed = {s: rng.integers(0, TINY.vocab_size, n).tolist() for s, n in ((0, 3), (1, 6), (2, 9))}
logits = {s: [] for s in fed}


def step(seq_ids, tokens):
    for s, row in zip(seq_ids, decode_step(model, cache, seq_ids, tokens, paged_attention)):
        logits[s].append(row)


for t in range(9):  # the prompts, ragged: a sequence joins the batch while it has prompt tokens left
    live = [s for s in fed if t < len(fed[s])]
    step(live, [fed[s][t] for s in live])
for child in (3, 4):  # two samples of prompt 2: they share its 3 blocks, the last one 1/4 full
    cache.fork(2, child)
    fed[child], logits[child] = list(fed[2]), list(logits[2])
show(manager)
for _ in range(4):
    live = sorted(fed)
    tokens = rng.integers(0, TINY.vocab_size, len(live)).tolist()
    step(live, tokens)
    for s, token in zip(live, tokens):
        fed[s].append(token)
show(manager)
for s in fed:
    error = np.abs(np.array(logits[s]) - model.forward(fed[s])).max()
    print(f"sequence {s}: {len(fed[s])} tokens in blocks {manager.tables[s]}, largest logit error {error:.1e}")

# %% [markdown]
# **Think about it.** With 16-token blocks, how much memory do the 64 sequences of a batch
# waste at most, for Llama-3-8B? How much would they waste if each reserved the model's
# 8,192-token context up front, as a contiguous cache must?
