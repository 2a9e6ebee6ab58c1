"""Latency hiding and parallel speed-up: Little's law for memory and for queues, the warps an H100 needs to keep HBM
busy, how registers cap it, and Amdahl's, Gustafson's and Karp-Flatt's laws (aisys.latency)."""

import math

from aisys import latency, prose
from aisys.hardware import CHIPS
from aisys.occupancy import H100 as H100_SM
from aisys.occupancy import occupancy

from ..card import Ask, Choice, Number, card

LATENCY_PAGE = "01-architecture/latency"
AMDAHL_PAGE = "01-architecture/amdahl-gustafson"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
NS = 10**-9
HBM_NS = 400  # a round HBM latency, near the pointer chase of chapter 2 (stated in each question)
FP32_WARP_LOAD = H100_SM.warp_size * 4  # bytes of one coalesced float32 load by a warp


@card(topic="architecture", difficulty="easy", frequency="high", page=LATENCY_PAGE)
def seed_cpu_bytes_in_flight():
    lat, bandwidth, per_element = 89 * NS, 131 * 10**9, 2 * 8
    in_flight = latency.bytes_in_flight(lat, bandwidth)
    return Ask(
        "A CPU's DRAM has a latency of 89 ns and a bandwidth of 131 GB/s. How many bytes must be in flight to use "
        "the whole bandwidth?",
        Number(in_flight, rel=0.02, unit="bytes"),
        f"Little's law: bytes in flight = latency x bandwidth = 89e-9 s x 131e9 B/s = {in_flight:,.0f} bytes. A core "
        f"running y = a*x + b on doubles one element at a time has {per_element} bytes in flight "
        f"({prose.percent(per_element, in_flight, digits=2)} of the bandwidth); "
        f"{math.ceil(in_flight / per_element):,} such accesses must be outstanding at once to fill the pipe. Careful "
        "with units: ns x GB/s is 1e-9 x 1e9, so the product of the bare numbers is already in bytes; a latency in ns "
        "times a bandwidth in B/s is not.")


@card(topic="architecture", difficulty="medium", frequency="high", page=LATENCY_PAGE)
def h100_hbm_bytes_in_flight():
    in_flight = latency.bytes_in_flight(HBM_NS * NS, H100.memory_bandwidth)
    return Ask(
        f"Take an H100 SXM5's HBM latency as {HBM_NS} ns. How many bytes must the whole GPU have in flight to reach "
        "the datasheet bandwidth (in MB)?",
        Number(in_flight / 10**6, rel=0.05, unit="MB"),
        f"{HBM_NS} ns x {prose.rate(H100.memory_bandwidth, 'B/s')} = {prose.rate(in_flight, 'B')}, or "
        f"{prose.rate(in_flight / H100_SM.sms, 'B')} per SM over {H100_SM.sms} SMs. A full SM of "
        f"{H100_SM.max_threads_per_sm:,} threads with one 4-byte load each has "
        f"{prose.rate(H100_SM.max_threads_per_sm * 4, 'B')} in flight: not enough, so memory-bound kernels use "
        "wider loads or several independent loads per thread.")


@card(topic="architecture", difficulty="medium", frequency="high", page=LATENCY_PAGE)
def h100_warps_needed_for_hbm():
    args = (HBM_NS * NS, H100.memory_bandwidth, H100_SM.sms, FP32_WARP_LOAD)
    warps = {ilp: latency.warps_needed(*args, ilp=ilp) for ilp in (1, 2, 4)}
    exact = latency.bytes_in_flight(HBM_NS * NS, H100.memory_bandwidth) / H100_SM.sms / FP32_WARP_LOAD
    return Ask(
        f"An H100 SXM5 (HBM latency {HBM_NS} ns) runs a kernel whose warps each have one coalesced float32 load "
        "(32 lanes x 4 bytes) outstanding at a time. How many warps per SM does it take to reach the datasheet "
        "bandwidth?",
        Number(warps[1], rel=0.02, unit="warps"),
        f"Per SM: {prose.rate(H100.memory_bandwidth, 'B/s')} x {HBM_NS} ns / {H100_SM.sms} SMs / "
        f"{FP32_WARP_LOAD} bytes per warp = {exact:.1f}, rounded up to {warps[1]} warps (a partial warp is a whole "
        f"one). An SM holds at most {H100_SM.max_warps_per_sm}: threads alone cannot do it. With 2 or 4 independent "
        f"loads per thread (ILP), {warps[2]} or {warps[4]} warps suffice (Volkov, 'Better performance at lower "
        "occupancy', GTC 2010).")


@card(topic="architecture", difficulty="hard", frequency="medium", page=LATENCY_PAGE)
def registers_cap_hbm_bandwidth():
    threads, registers = 256, 128
    resident = occupancy(threads, registers).warps_per_sm
    reached = latency.bandwidth_at_registers(HBM_NS * NS, H100.memory_bandwidth, threads, registers, FP32_WARP_LOAD)
    with_ilp = latency.bandwidth_at_registers(HBM_NS * NS, H100.memory_bandwidth, threads, registers, FP32_WARP_LOAD,
                                              ilp=4)
    return Ask(
        f"A memory-bound kernel on an H100 SXM5 uses blocks of {threads} threads and {registers} registers per "
        f"thread, each warp with one coalesced float32 load outstanding; HBM latency {HBM_NS} ns. What percentage of "
        "the datasheet bandwidth can it reach?",
        Number(100 * reached / H100.memory_bandwidth, rel=0.05, unit="%"),
        f"{registers} registers x {H100_SM.warp_size} threads = {registers * H100_SM.warp_size:,} registers per warp, "
        f"so {H100_SM.registers_per_sm:,} registers hold {resident} warps per SM. In flight: {H100_SM.sms} SMs x "
        f"{resident} warps x {FP32_WARP_LOAD} bytes = {prose.rate(H100_SM.sms * resident * FP32_WARP_LOAD, 'B')}; "
        f"divided by {HBM_NS} ns that is {prose.rate(reached, 'B/s')}, "
        f"{prose.percent(reached, H100.memory_bandwidth)} of {prose.rate(H100.memory_bandwidth, 'B/s')}. Four "
        f"independent loads per thread give {prose.percent(with_ilp, H100.memory_bandwidth)}: occupancy caps the "
        "bytes in flight, ILP raises them back.")


@card(topic="architecture", difficulty="easy", frequency="high", page=AMDAHL_PAGE)
def amdahl_limit_five_percent():
    serial = 5 / 100
    limit = latency.amdahl_limit(serial)
    return Ask(
        "5% of a program's run time on one processor is serial; the rest parallelises perfectly. What is the "
        "largest speed-up any number of processors can give?",
        Number(limit, rel=0.02, unit="x"),
        f"Amdahl: S(p) = 1 / (s + (1 - s)/p), which tends to 1/s = {limit:g} as p grows. On 1,024 processors it "
        f"is {latency.amdahl_speedup(serial, 1024):.1f}; half the limit is reached at p = 1/s - 1 = "
        f"{round(1 / serial - 1)}. (Gustafson's scaled speed-up on 1,024 processors, with s the serial share of "
        f"the time on those processors, is {latency.gustafson_speedup(serial, 1024):,.1f}: a different question.)")


@card(topic="architecture", difficulty="medium", frequency="medium", page=AMDAHL_PAGE)
def gustafson_scaled_speedup():
    serial, p = 10 / 100, 64
    scaled = latency.gustafson_speedup(serial, p)
    return Ask(
        f"A weak-scaling run on {p} processors spends 10% of its time in serial code. By Gustafson's law, what "
        "speed-up over one processor does it achieve on its (scaled) problem?",
        Number(scaled, rel=0.02, unit="x"),
        f"Gustafson: S = s + p (1 - s) = 0.1 + {p} x 0.9 = {scaled:.1f}. One processor would need s for the serial "
        f"part and p (1 - s) for the parallel work the {p} processors shared. Amdahl's formula with the same s "
        f"would give {latency.amdahl_speedup(serial, p):.1f}, but there s is a share of the one-processor time of a "
        "fixed problem.")


@card(topic="architecture", difficulty="hard", frequency="medium", page=AMDAHL_PAGE)
def karp_flatt_rising_serial_fraction():
    measured = {8: 6, 64: 12}
    e = {p: latency.karp_flatt(speedup, p) for p, speedup in measured.items()}
    options = ("serial code: e stays constant, so Amdahl's limit 1/e applies",
               "parallel overhead that grows with p (communication, imbalance): e rises with p",
               "a super-linear cache effect: e is negative",
               "nothing: both speed-ups are what Amdahl's law predicts for one serial fraction")
    return Ask(
        "A program runs 6 times faster on 8 processors and 12 times faster on 64. What do the Karp-Flatt "
        "serial fractions say limits it?",
        Choice(options, 1),
        f"Karp-Flatt: e = (1/S - 1/p) / (1 - 1/p). At p = 8, e = {e[8]:.4f}; at p = 64, e = {e[64]:.4f}. A constant "
        "e would be serial work; a rising e means the loss grows with p, the mark of communication, "
        "synchronisation or load imbalance. A single serial fraction of "
        f"{e[8]:.4f} would have predicted {latency.amdahl_speedup(e[8], 64):.1f} on 64.")


@card(topic="architecture", difficulty="easy", frequency="medium", page=LATENCY_PAGE)
def littles_law_serving_queue():
    rate, seconds = 20, 4
    concurrent = latency.in_flight(rate, seconds)
    return Ask(
        f"An LLM server completes {rate} requests per second, and each request spends {seconds} s in the server on "
        "average. How many requests are in the server at once?",
        Number(concurrent, rel=0.02, unit="requests"),
        f"Little's law, L = lambda W: {rate} requests/s x {seconds} s = {concurrent:g} requests in flight. It holds "
        "for any system in a steady state, whatever the order of service: the same law sizes the bytes in flight of "
        "a memory system (latency x bandwidth) and the batch a continuous-batching server must hold to sustain a "
        "throughput at a given latency.")
