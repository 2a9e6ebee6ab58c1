"""Calls an update lost when at most half the spacing above |w|: wrong at odd ties and below a power of two."""

import math

FAILS = ["lost_update"]


def lost_update(w, update, dtype):
    w = float(round_to(w, dtype))  # noqa: F821
    spacing = 2.0 ** (math.floor(math.log2(abs(w))) - FRACTION_BITS[dtype])  # noqa: F821
    return abs(update) <= spacing / 2
