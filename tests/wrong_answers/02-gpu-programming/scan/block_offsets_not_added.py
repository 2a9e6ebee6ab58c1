"""Stops after the block scans: every block restarts from zero, as if the blocks before it summed to nothing."""

FAILS = ["scan"]


def scan(x):
    return block_scan(x)  # noqa: F821
