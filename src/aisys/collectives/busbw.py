"""Algorithm bandwidth and bus bandwidth of a collective, in the convention of NVIDIA's nccl-tests.

algbw = bytes / seconds, with `bytes` the size of one rank's buffer (for all-gather the
gathered output, for reduce-scatter the input, as nccl-tests counts them). busbw multiplies
algbw by the fraction of those bytes that each rank must move over its link in the
bandwidth-optimal algorithm, so that busbw is comparable with the link's bandwidth whatever
the number of ranks: 2(p-1)/p for all-reduce, (p-1)/p for all-gather, reduce-scatter and
all-to-all, 1 for broadcast and reduce. Source: nccl-tests, doc/PERFORMANCE.md.
"""

from .._validate import nonnegative_number, one_of, positive_int, positive_number

FACTORS = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
}


def bus_factor(collective: str, world_size: int) -> float:
    """busbw / algbw for `collective` on `world_size` ranks."""
    return FACTORS[one_of("collective", collective, tuple(FACTORS))](positive_int("world_size", world_size))


def algorithm_bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes of one rank's buffer per second."""
    return nonnegative_number("nbytes", nbytes) / positive_number("seconds", seconds)


def bus_bandwidth(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """algbw x bus_factor: comparable with one link's one-way bandwidth (aisys.interconnect)."""
    return algorithm_bandwidth(nbytes, seconds) * bus_factor(collective, world_size)
