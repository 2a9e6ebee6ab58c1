"""Ranks np.abs(W) in W's own dtype: |-128| of int8 wraps to -128, so the largest weight is pruned first."""

FAILS = ["prune_2_4", "compress"]


def mask_2_4(W):
    M, K = W.shape
    magnitude = np.abs(W).reshape(M, K // 4, 4, 1)  # noqa: F821
    other = magnitude.reshape(M, K // 4, 1, 4)
    position = np.arange(4)  # noqa: F821
    beats = (other > magnitude) | ((other == magnitude) & (position < position[:, None]))
    return (beats.sum(axis=-1) < 2).reshape(M, K)
