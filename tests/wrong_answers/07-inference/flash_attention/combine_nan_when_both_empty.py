"""Rescales by exp(m1 - m) without a stand-in for m = -inf: two empty states give exp(-inf - (-inf)) = NaN. The
tiled pass never combines two empty states (key 0 is visible to every query), but partial states of split keys do."""

FAILS = ["combine"]


def combine(m1, l1, acc1, m2, l2, acc2):
    m = np.maximum(m1, m2)  # noqa: F821
    scale1, scale2 = np.exp(m1 - m), np.exp(m2 - m)  # noqa: F821
    return m, scale1 * l1 + scale2 * l2, scale1[:, None] * acc1 + scale2[:, None] * acc2
