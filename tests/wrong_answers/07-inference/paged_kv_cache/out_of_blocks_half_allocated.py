"""Takes blocks one at a time and raises OutOfBlocks only when the free list is empty: a failed call keeps what it took."""

FAILS = ["out_of_blocks", "random_operations"]


class BlockManager(BlockManager):  # noqa: F821 (the solution's, in the notebook's namespace)
    def _require(self, needed):
        pass

    def _take(self):
        if not self.free_blocks:
            raise OutOfBlocks(1, 0)  # noqa: F821
        return super()._take()
