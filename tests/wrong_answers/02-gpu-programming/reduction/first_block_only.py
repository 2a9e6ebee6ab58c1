"""Returns the first block's partial sum: right up to BLOCK elements, and forgets the other blocks past that."""

FAILS = ["reduce_sum", "reduce_sum_profile"]


def reduce_sum(x):
    return block_sums_shuffle(x)[0]  # noqa: F821
