"""Adds half a step and clears the dropped bits: rounds half away from zero, so every tie goes up in magnitude."""

import numpy as np

FAILS = ["round_to_bf16", "round_to", "lost_update", "dot"]


def round_low_bits(x, dropped):
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + (1 << (dropped - 1))) >> dropped << dropped
    result = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), result)
