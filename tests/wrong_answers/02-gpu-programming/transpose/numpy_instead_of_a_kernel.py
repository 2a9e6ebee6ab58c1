"""Returns numpy's a.T: the right values, but no kernel ran, so there is nothing coalesced or race-free to see."""

FAILS = ["transpose_coalesced", "transpose_no_bank_conflicts", "transpose_race_free"]


def transpose(a):
    return np.ascontiguousarray(a.T)  # noqa: F821
