"""Divides algbw by the bus factor instead of multiplying: an all-reduce's busbw comes out below its algbw."""

FAILS = ["bus_bandwidth"]


def bus_bandwidth(collective, nbytes, seconds, world_size):
    p = world_size
    factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p, "reduce_scatter": (p - 1) / p,
              "broadcast": 1.0}[collective]
    return nbytes / seconds / factor if factor else float("inf")
