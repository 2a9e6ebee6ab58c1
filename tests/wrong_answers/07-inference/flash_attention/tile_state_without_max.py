"""Takes exp(scores) without subtracting the row's max (m = 0): right for ordinary scores, inf / inf = NaN once a
score passes 88.7 (float32) or 709.8 (float64)."""

FAILS = ["tile_state", "flash_attention_large_logits"]


def tile_state(scores, v):
    m = np.where(np.isneginf(scores).all(axis=1), -np.inf, 0.0).astype(scores.dtype)  # noqa: F821
    p = np.exp(scores)  # noqa: F821
    return m, p.sum(axis=1), p @ v
