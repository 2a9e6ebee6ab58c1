"""Gather always collects at rank 0, whatever `root` says."""

FAILS = ["rooted"]


def gather(buffers, root):
    return [np.concatenate(buffers) if rank == 0 else b.copy() for rank, b in enumerate(buffers)]  # noqa: F821
