"""fork shares the parent's blocks but does not count the new references."""

FAILS = ["fork_and_copy_on_write", "out_of_blocks", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def fork(self, parent_id, child_id):
        self._check_live("parent_id", parent_id)
        self._check_new("child_id", child_id)
        self.tables[child_id] = list(self.tables[parent_id])
        self.lengths[child_id] = self.lengths[parent_id]
