"""Takes the last 2 of an ascending sort, so that among equal magnitudes the higher position wins."""

FAILS = ["prune_2_4", "compress"]


def mask_2_4(W):
    M, K = W.shape
    magnitude = np.abs(W.astype(np.float64)).reshape(M, K // 4, 4)  # noqa: F821
    order = np.argsort(magnitude, axis=-1, kind="stable")  # noqa: F821
    mask = np.zeros((M, K // 4, 4), dtype=bool)  # noqa: F821
    np.put_along_axis(mask, order[..., 2:], True, axis=-1)  # noqa: F821
    return mask.reshape(M, K)
