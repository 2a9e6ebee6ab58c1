"""Rounds NaN's bits like a number's: a NaN with its payload only in the dropped bits becomes inf (or 0)."""

import numpy as np

FAILS = ["round_to_bf16", "round_to"]


def round_low_bits(x, dropped):
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    lowest_kept = (bits >> dropped) & 1
    rounded = (bits + (1 << (dropped - 1)) - 1 + lowest_kept) >> dropped << dropped
    return (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
