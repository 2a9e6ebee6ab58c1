"""Computes the outputs directly, with 6 (36) multiplications, and returns those: right outputs, no Winograd."""

FAILS = ["winograd_f23", "winograd_f23_tile"]


def winograd_f23(d, g):
    products = np.array([d[i + k] * g[k] for i in range(2) for k in range(3)])  # noqa: F821
    return {"products": products, "y": products.reshape(2, 3).sum(axis=1)}


def winograd_f23_tile(d, g):
    windows = np.array([[d[i:i + 3, j:j + 3] * g for j in range(2)] for i in range(2)])  # noqa: F821
    return {"products": windows, "y": windows.sum(axis=(2, 3))}
