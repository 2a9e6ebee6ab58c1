"""Shuffles up instead of down: lane 0 has no lane below it, so it adds its own value to itself five times."""

FAILS = ["cuda_sum"]

SUM_SOURCE = SUM_SOURCE.replace("__shfl_down_sync", "__shfl_up_sync")  # noqa: F821
assert "__shfl_up_sync" in SUM_SOURCE
