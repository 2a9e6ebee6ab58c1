"""Returns np.sort(x): the right values, but no kernel ran, so there are no stages to count."""

FAILS = ["bitonic_sort_launches"]


def bitonic_sort(x):
    return np.sort(x)  # noqa: F821
