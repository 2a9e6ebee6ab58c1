"""Sums everything in one block (a grid-stride loop over the whole array): right, but one multiprocessor does all the work."""

FAILS = ["reduce_sum_profile"]


def reduce_sum(x):
    total = np.zeros(1, x.dtype)  # noqa: F821
    sum_kernel(x.dtype.type)[1, BLOCK](x, total)  # noqa: F821
    return total[0]
