"""Transforms the data with B (BT.T @ d) instead of B^T: the products, and so the outputs, are wrong."""

FAILS = ["winograd_f23", "winograd_f23_tile"]


def winograd_f23(d, g):
    products = (G @ g) * (BT.T @ d)  # noqa: F821
    return {"products": products, "y": AT @ products}  # noqa: F821


def winograd_f23_tile(d, g):
    products = (G @ g @ G.T) * (BT.T @ d @ BT)  # noqa: F821
    return {"products": products, "y": AT @ products @ AT.T}  # noqa: F821
