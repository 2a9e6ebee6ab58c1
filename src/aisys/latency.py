"""Latency hiding: Little's law, the warps and occupancy a GPU needs to keep its memory busy, and Amdahl's and
Gustafson's laws for the speed-up that parallel hardware can give.

Little's law (Little, "A proof for the queuing formula L = lambda W", Operations Research 9(3), 1961): in a
system in a steady state, the number of items inside equals the rate at which they arrive times the time each
spends inside. For a memory system the items are bytes: to deliver a bandwidth W (bytes/s) against a latency
L (s), W * L bytes must be requested and not yet delivered at every moment. A GPU gets them in flight with many
warps, each with one or more independent loads outstanding (instruction-level parallelism, ILP: Volkov,
"Better performance at lower occupancy", GTC 2010).

Amdahl ("Validity of the single processor approach to achieving large scale computing capabilities", AFIPS 1967)
bounds the speed-up of a fixed problem on p processors when a fraction s of its one-processor time is serial;
Gustafson ("Reevaluating Amdahl's law", CACM 31(5), 1988) gives the speed-up of a problem scaled to p
processors, s being the serial fraction of the time on p; Karp and Flatt ("Measuring parallel processor
performance", CACM 33(5), 1990) infer the serial fraction from a measured speed-up.

Units are SI throughout: seconds, bytes, bytes per second. Warp counts are whole warps, rounded up.
"""

import math
from numbers import Integral, Real

from ._validate import nonnegative_int, positive_int, positive_number
from .occupancy import H100, SMLimits, occupancy


def _fraction(name: str, value) -> float:
    """A number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


# Little's law


def in_flight(rate: float, latency: float) -> float:
    """Little's law, L = lambda W: items inside a system that takes `rate` items per second, each staying
    `latency` seconds (requests in a server, bytes in a memory system, packets on a link)."""
    return positive_number("rate", rate) * positive_number("latency", latency)


def bytes_in_flight(latency: float, bandwidth: float) -> float:
    """Bytes that must be requested and not yet delivered to sustain `bandwidth` (bytes/s) when each request
    takes `latency` seconds: latency x bandwidth."""
    return in_flight(positive_number("bandwidth", bandwidth), positive_number("latency", latency))


def loads_in_flight_per_sm(latency: float, bandwidth: float, sms: int, bytes_per_load: int) -> float:
    """Loads of `bytes_per_load` bytes each SM must keep outstanding, the chip's bytes in flight shared by its
    `sms` SMs."""
    sms, size = positive_int("sms", sms), positive_int("bytes_per_load", bytes_per_load)
    return bytes_in_flight(latency, bandwidth) / sms / size


def warps_needed(latency: float, bandwidth: float, sms: int, bytes_per_warp_load: int, ilp: int = 1,
                 fraction: float = 1.0) -> int:
    """Warps per SM that reach `fraction` of `bandwidth`, each warp keeping `ilp` independent loads of
    `bytes_per_warp_load` bytes (the bytes one warp-wide load instruction moves: 32 lanes x 4 bytes = 128 for a
    coalesced float32 load) outstanding. Rounded up: a partial warp is a whole warp."""
    sms, size, ilp = positive_int("sms", sms), positive_int("bytes_per_warp_load", bytes_per_warp_load), \
        positive_int("ilp", ilp)
    fraction = _fraction("fraction", fraction)
    per_sm = fraction * bytes_in_flight(latency, bandwidth) / sms
    return math.ceil(per_sm / (size * ilp))


def occupancy_needed(latency: float, bandwidth: float, bytes_per_warp_load: int, ilp: int = 1,
                     fraction: float = 1.0, sm: SMLimits = H100) -> float:
    """The occupancy (resident warps over the SM's most) that `warps_needed` asks of every SM of `sm`. Above 1,
    threads alone cannot reach the bandwidth: more ILP or wider loads must."""
    if not isinstance(sm, SMLimits):
        raise TypeError(f"sm must be an SMLimits such as occupancy.H100, got {sm!r}")
    return warps_needed(latency, bandwidth, sm.sms, bytes_per_warp_load, ilp, fraction) / sm.max_warps_per_sm


def bandwidth_reached(latency: float, bandwidth: float, sms: int, warps_per_sm: int, bytes_per_warp_load: int,
                      ilp: int = 1) -> float:
    """Little's law the other way: bytes in flight / latency, capped at the peak `bandwidth`, when every SM
    holds `warps_per_sm` warps, each with `ilp` loads of `bytes_per_warp_load` bytes outstanding."""
    latency, bandwidth = positive_number("latency", latency), positive_number("bandwidth", bandwidth)
    sms, warps = positive_int("sms", sms), nonnegative_int("warps_per_sm", warps_per_sm)
    size, ilp = positive_int("bytes_per_warp_load", bytes_per_warp_load), positive_int("ilp", ilp)
    return min(bandwidth, sms * warps * ilp * size / latency)


def bandwidth_at_registers(latency: float, bandwidth: float, threads_per_block: int, registers_per_thread: int,
                           bytes_per_warp_load: int, ilp: int = 1, shared_per_block: int = 0,
                           sm: SMLimits = H100) -> float:
    """The bandwidth reached when the warps resident on each SM are those that registers, shared memory, threads
    and blocks allow (aisys.occupancy), not as many as one would like: occupancy caps the bytes in flight."""
    resident = occupancy(threads_per_block, registers_per_thread, shared_per_block, sm).warps_per_sm
    return bandwidth_reached(latency, bandwidth, sm.sms, resident, bytes_per_warp_load, ilp)


# Amdahl, Gustafson, Karp and Flatt


def amdahl_speedup(serial_fraction: float, p: int) -> float:
    """Speed-up of a fixed problem on p processors when `serial_fraction` of its time on one is serial:
    1 / (s + (1 - s) / p)."""
    s, p = _fraction("serial_fraction", serial_fraction), positive_int("p", p)
    return 1 / (s + (1 - s) / p)


def amdahl_limit(serial_fraction: float) -> float:
    """Amdahl's speed-up as p grows without bound: 1 / s (infinite for s = 0)."""
    s = _fraction("serial_fraction", serial_fraction)
    return math.inf if s == 0 else 1 / s


def gustafson_speedup(serial_fraction: float, p: int) -> float:
    """Scaled speed-up: the problem grows with p, `serial_fraction` being the serial share of the time on p
    processors; one processor would take s + p (1 - s) as long: s + p (1 - s)."""
    s, p = _fraction("serial_fraction", serial_fraction), positive_int("p", p)
    return s + p * (1 - s)


def karp_flatt(speedup: float, p: int) -> float:
    """The experimentally determined serial fraction e = (1/S - 1/p) / (1 - 1/p) of a speed-up S measured on
    p >= 2 processors: Amdahl's s that would give S. Constant in p, the loss is serial work; growing with p, it
    is parallel overhead (communication, imbalance). Negative for a super-linear speed-up."""
    speedup = positive_number("speedup", speedup)
    if isinstance(p, bool) or not isinstance(p, Integral) or p < 2:
        raise ValueError(f"p must be an integer >= 2 (with one processor there is no speed-up to measure), got {p!r}")
    return (1 / speedup - 1 / int(p)) / (1 - 1 / int(p))
