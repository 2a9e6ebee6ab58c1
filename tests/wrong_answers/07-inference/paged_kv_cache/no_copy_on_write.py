"""append writes into a shared, partly filled last block instead of copying it: the siblings' tokens change."""

FAILS = ["fork_and_copy_on_write", "out_of_blocks", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def append(self, seq_id, n=1):
        self._check_live("seq_id", seq_id)
        self._check_count("n", n)
        table = self.tables[seq_id]
        self._require(self._blocks_for(self.lengths[seq_id] + n) - len(table))
        self.lengths[seq_id] += n
        while len(table) < self._blocks_for(self.lengths[seq_id]):
            table.append(self._take())
        return []
