"""Takes the groups of 4 down each column (along M) instead of along each row (along K)."""

FAILS = ["prune_2_4", "compress"]

_mask_along_rows = mask_2_4  # noqa: F821


def mask_2_4(W):
    return _mask_along_rows(W.T).T
