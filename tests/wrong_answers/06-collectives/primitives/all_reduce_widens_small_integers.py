"""Reduces with np.sum(np.stack(...)) and friends, which turn int8, uint8 and int32 buffers into int64."""

FAILS = ["all_reduce"]


def all_reduce(buffers, op="sum"):
    stacked = np.stack(buffers)  # noqa: F821
    total = {"sum": np.sum, "product": np.prod, "min": np.min, "max": np.max}[op](stacked, axis=0)  # noqa: F821
    return [total.copy() for _ in buffers]
