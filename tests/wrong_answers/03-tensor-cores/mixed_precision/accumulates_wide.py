"""Adds the products in float64 and rounds only the result: no partial sum is ever rounded to fp16 or bf16."""

import numpy as np

FAILS = ["dot"]


def dot(a, b, storage, accumulate, order="sequential"):
    products = round_to(a, storage).astype(np.float64) * round_to(b, storage)  # noqa: F821
    return float(round_to(products.sum(), accumulate))  # noqa: F821
