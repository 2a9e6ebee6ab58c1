"""Returns None when too few blocks are free instead of raising OutOfBlocks: the scheduler never learns to preempt."""

FAILS = ["out_of_blocks", "random_operations"]


class _Silent(Exception):
    pass


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def _require(self, needed):
        if needed > len(self.free_blocks):
            raise _Silent

    def allocate(self, seq_id, num_tokens):
        try:
            return super().allocate(seq_id, num_tokens)
        except _Silent:
            return None

    def append(self, seq_id, n=1):
        try:
            return super().append(seq_id, n)
        except _Silent:
            return None
