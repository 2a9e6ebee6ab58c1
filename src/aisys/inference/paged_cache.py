"""A model's K/V pools driven by a block manager, and one decode step of a batch over them.

`PagedKVCache` owns the physical blocks of every layer, `(n_layers, num_blocks, block_size, nkv,
hs)` per tensor (each layer's slice is the layout of `aisys.inference.paged_attention`), and asks a
block manager (`aisys.inference.paged.BlockManager`, or any object with its `allocate`, `append`,
`fork`, `free`, `tables`, `lengths`, `block_size` and `ref_counts`) where each token goes. All
layers share one block table per sequence, as in vLLM: block b of layer 0 and block b of layer 1
belong to the same sequence. This module does not import the manager, so it runs on a student's.
"""

import numpy as np

from .._validate import positive_int


class PagedKVCache:
    """K and V pools for `n_layers` layers, whose blocks `manager` hands out."""

    def __init__(self, manager, n_layers: int, n_kv_heads: int, head_size: int, dtype="float32"):
        shape = (positive_int("n_layers", n_layers), len(manager.ref_counts), manager.block_size,
                 positive_int("n_kv_heads", n_kv_heads), positive_int("head_size", head_size))
        self.manager = manager
        self.k, self.v = np.zeros(shape, dtype), np.zeros(shape, dtype)

    def append(self, seq_id: int, n: int = 1) -> np.ndarray:
        """Room for n new tokens of `seq_id` (a new sequence if unknown): their (n, 2) slots (block, offset).

        Copy-on-write happens here: the blocks the manager asks to copy are copied in every layer
        before the new tokens' keys and values are written.
        """
        if seq_id in self.manager.tables:
            for src, dst in self.manager.append(seq_id, n):
                self.k[:, dst], self.v[:, dst] = self.k[:, src], self.v[:, src]
        else:
            self.manager.allocate(seq_id, n)
        length, block_size = self.manager.lengths[seq_id], self.manager.block_size
        positions = np.arange(length - n, length)
        table = np.asarray(self.manager.tables[seq_id])
        return np.stack([table[positions // block_size], positions % block_size], axis=1)

    def write(self, layer: int, slots, k, v) -> None:
        """Store the keys and values (n, nkv, hs) of n tokens of `layer` at their slots."""
        blocks, offsets = np.asarray(slots).T
        self.k[layer, blocks, offsets] = k
        self.v[layer, blocks, offsets] = v

    def fork(self, parent_id: int, child_id: int) -> None:
        self.manager.fork(parent_id, child_id)

    def free(self, seq_id: int) -> None:
        self.manager.free(seq_id)

    def batch(self, seq_ids) -> tuple[np.ndarray, np.ndarray]:
        """`block_tables` (B, max_blocks), padded with 0 past each sequence's blocks, and `context_lens` (B,)."""
        tables = [self.manager.tables[s] for s in seq_ids]
        block_tables = np.zeros((len(tables), max(map(len, tables))), np.int64)
        for row, table in zip(block_tables, tables):
            row[:len(table)] = table
        return block_tables, np.array([self.manager.lengths[s] for s in seq_ids], np.int64)


def decode_step(model, cache: PagedKVCache, seq_ids, tokens, attend) -> np.ndarray:
    """Feed one token to each sequence of a batch, its keys and values stored in `cache`: (B, V) logits.

    `attend(q (B, nh, hs), k_cache, v_cache, block_tables, context_lens)` is a paged attention
    (`aisys.inference.paged_attention.paged_attention`, or yours). A prompt goes in one token per
    step here, which is slow but enough for a tiny model: an engine runs it in one prefill pass.
    """
    seq_ids = list(seq_ids)
    if len(set(seq_ids)) != len(seq_ids) or len(tokens) != len(seq_ids):
        raise ValueError(f"seq_ids must be distinct and match tokens one to one, got {seq_ids} and {list(tokens)}")
    slots = np.concatenate([cache.append(s, 1) for s in seq_ids])  # (B, 2)
    block_tables, context_lens = cache.batch(seq_ids)
    x = model.embed(tokens)  # (B, C)
    for layer in range(model.config.n_layers):
        q, k, v = model.qkv(layer, x, context_lens - 1)  # each token at its own position
        cache.write(layer, slots, k, v)
        x = model.finish(layer, x, attend(q, cache.k[layer], cache.v[layer], block_tables, context_lens))
    return model.logits(x)
