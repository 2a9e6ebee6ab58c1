"""free puts every block of the sequence back on the free list, even those another table still holds."""

FAILS = ["fork_and_copy_on_write", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def free(self, seq_id):
        self._check_live("seq_id", seq_id)
        del self.lengths[seq_id]
        for block in reversed(self.tables.pop(seq_id)):
            self.ref_counts[block] = max(self.ref_counts[block] - 1, 0)
            if block not in self.free_blocks:
                self.free_blocks.append(block)
