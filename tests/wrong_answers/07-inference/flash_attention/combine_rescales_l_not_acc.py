"""Rescales the sums l by exp(m_side - m) but adds the accumulators acc unscaled: numerator and denominator disagree."""

FAILS = ["combine", "flash_attention", "flash_attention_decode", "flash_attention_large_logits"]


def combine(m1, l1, acc1, m2, l2, acc2):
    m = np.maximum(m1, m2)  # noqa: F821
    safe = np.where(np.isneginf(m), 0.0, m)  # noqa: F821
    return m, np.exp(m1 - safe) * l1 + np.exp(m2 - safe) * l2, acc1 + acc2  # noqa: F821
