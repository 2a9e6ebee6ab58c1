"""Launches even for n = 0: a grid of ceil(0 / THREADS) = 0 blocks, which a GPU refuses as an invalid launch."""

FAILS = ["vector_add"]


def vector_add(x, y):
    out = np.empty_like(x)  # noqa: F821
    blocks = min(MAX_BLOCKS, -(-x.size // THREADS))  # noqa: F821
    vector_add_kernel[blocks, THREADS](x, y, out)  # noqa: F821
    return out
