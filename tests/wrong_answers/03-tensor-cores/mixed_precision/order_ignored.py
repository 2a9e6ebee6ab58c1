"""Keeps one running sum whatever the order: pairwise asks for a tree of rounded additions."""

import numpy as np

FAILS = ["dot"]


def dot(a, b, storage, accumulate, order="sequential"):
    terms = round_to(round_to(a, storage).astype(np.float64) * round_to(b, storage), accumulate)  # noqa: F821
    total = terms[0]
    for term in terms[1:]:
        total = round_to(np.float64(total) + term, accumulate)  # noqa: F821
    return float(total)
