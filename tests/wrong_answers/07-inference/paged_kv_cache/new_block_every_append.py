"""Takes a new block on every append, even when the last block has room: up to a block wasted per append."""

FAILS = ["allocate_and_append", "fork_and_copy_on_write", "out_of_blocks", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def append(self, seq_id, n=1):
        self._check_live("seq_id", seq_id)
        self._check_count("n", n)
        needed = self._blocks_for(n)
        self._require(needed)
        self.lengths[seq_id] += n
        self.tables[seq_id] += [self._take() for _ in range(needed)]
        return []
