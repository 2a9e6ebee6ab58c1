"""Transforms the filter as G g^T G^T in 2-D: the tile is correlated with the transposed 3x3 filter."""

FAILS = ["winograd_f23_tile"]


def winograd_f23_tile(d, g):
    products = (G @ g.T @ G.T) * (BT @ d @ BT.T)  # noqa: F821
    return {"products": products, "y": AT @ products @ AT.T}  # noqa: F821
