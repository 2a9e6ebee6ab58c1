"""Does not validate: an unknown sequence raises a bare KeyError, allocating an existing id overwrites it."""

FAILS = ["bad_input", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def _check_live(self, name, seq_id):
        self.tables[seq_id]

    def _check_new(self, name, seq_id):
        pass
