"""Clears the dropped bits without adding the rounding increment: truncation, which rounds toward zero."""

import numpy as np

FAILS = ["round_to_bf16", "round_to", "lost_update", "dot"]


def round_low_bits(x, dropped):
    x = np.asarray(x, dtype=np.float32)
    result = (x.view(np.uint32) >> dropped << dropped).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), result)
