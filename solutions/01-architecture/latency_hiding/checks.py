"""Checks: Little's law, warps and occupancy needed to reach a bandwidth, Amdahl, Gustafson and Karp-Flatt.

Visible cases use an H100 SXM5 (132 SMs, 3.35 TB/s, aisys.hardware) and an A100 SXM4 (108 SMs, 2.039 TB/s) with
round latencies near the HBM latency chapter 2 measured; hidden cases draw latencies, bandwidths, SM counts,
load widths, ILP and fractions from the seed and add the edges (fraction 0, no warps, serial fractions 0 and 1,
p = 1, super-linear speed-ups, blocks of 1024 threads at the register limit). Warp counts must be ints, exact;
cases whose exact count lies within 1e-6 of a whole number are left out, so that the order of the multiplications
cannot decide the rounding.
"""

import math
import re
from dataclasses import replace

from aisys import latency
from aisys.hardware import chip
from aisys.occupancy import H100, occupancy

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, shown, unredacted

NS = 1e-9
# Floats: the student may multiply in another order than the reference; 1e-9 is far above float64's rounding
# (a few ulps over five operations) and far below any mistake of a unit or a factor.
RTOL = (1e-9, 0.0)
H100_BW = chip("NVIDIA H100 SXM5 80GB").memory_bandwidth
A100_BW = chip("NVIDIA A100 SXM4 80GB").memory_bandwidth
FP32_LOAD, FLOAT4_LOAD = 32 * 4, 32 * 16  # bytes a coalesced warp-wide load moves


def _ref_bytes(latency_ns, bandwidth):
    return latency.bytes_in_flight(latency_ns * NS, bandwidth)


def _ref_warps(latency_ns, bandwidth, sms, bytes_per_warp_load, ilp=1, fraction=1.0):
    return latency.warps_needed(latency_ns * NS, bandwidth, sms, bytes_per_warp_load, ilp, fraction)


def _ref_reached(latency_ns, bandwidth, sms, warps_per_sm, bytes_per_warp_load, ilp=1):
    return latency.bandwidth_reached(latency_ns * NS, bandwidth, sms, warps_per_sm, bytes_per_warp_load, ilp)


def _ref_resident(threads_per_block, registers_per_thread):
    return occupancy(threads_per_block, registers_per_thread, 0, H100).warps_per_sm


def _ref_at_registers(latency_ns, bandwidth, sms, threads_per_block, registers_per_thread, bytes_per_warp_load,
                      ilp=1):
    # the A100's SM limits are the H100's but for shared memory, which these cases do not use
    return latency.bandwidth_at_registers(latency_ns * NS, bandwidth, threads_per_block, registers_per_thread,
                                          bytes_per_warp_load, ilp, 0, replace(H100, sms=sms))


def _exact_warps(case) -> float:
    return (case.get("fraction", 1.0) * case["latency_ns"] * NS * case["bandwidth"] / case["sms"]
            / (case["bytes_per_warp_load"] * case.get("ilp", 1)))


def _clear_of_integers(case) -> bool:
    exact = _exact_warps(case)
    return exact == 0 or abs(exact - round(exact)) > 1e-6


def _chip_case(rng) -> dict:
    """Latency 50-2000 ns, bandwidth 50 GB/s - 10 TB/s, 1-200 SMs, a real load width."""
    return {"latency_ns": float(10 ** rng.uniform(math.log10(50), math.log10(2000))),
            "bandwidth": float(10 ** rng.uniform(10.7, 13)), "sms": int(rng.integers(1, 201)),
            "bytes_per_warp_load": int(rng.choice([32, 64, 128, 256, 512]))}


@check(points=1)
def bytes_in_flight(student, rng, hidden):
    """bytes_in_flight(latency_ns, bandwidth) = latency in seconds x bandwidth in bytes/s: the seed's Xeon, an H100,
    an A100."""
    cases = [{"latency_ns": 89.0, "bandwidth": 131e9},  # seed 003: 11,659 bytes
             {"latency_ns": 400.0, "bandwidth": H100_BW}, {"latency_ns": 500.0, "bandwidth": A100_BW}]
    if hidden:
        cases = cases + [{"latency_ns": 1.0, "bandwidth": 1e9}, {"latency_ns": 0.5, "bandwidth": 3.0}]
        cases += [{k: v for k, v in _chip_case(rng).items() if k in ("latency_ns", "bandwidth")} for _ in range(10)]
    compare_cases(student, "bytes_in_flight", cases, _ref_bytes, returns="number", hidden=hidden, tolerance=RTOL,
                  hint=_units_hint)


def _units_hint(case, got, expected) -> str:
    if isinstance(got, (int, float)) and expected and math.isclose(got / expected, 1e9, rel_tol=1e-6):
        return ("a factor of 1e9 too many: latency_ns is in nanoseconds and bandwidth in bytes per second, so the "
                "latency must be converted to seconds (times 1e-9) first")
    return "bytes in flight = (latency_ns * 1e-9 seconds) x (bandwidth bytes/s)"


def _warps_hint(case, got, expected) -> str:
    exact = _exact_warps(case)
    if got == math.floor(exact):
        return "rounded down: a partial warp must be a whole one, or the target is missed; round up (math.ceil)"
    if case.get("ilp", 1) > 1 and got == math.ceil(exact * case["ilp"]):
        return "that is the count for one load per warp: each warp has ilp loads in flight, ilp times the bytes"
    if isinstance(got, (int, float)) and expected and got > 1e6 * expected:
        return "far too many: convert latency_ns to seconds (times 1e-9) before multiplying by bytes per second"
    return ("warps = ceil(fraction x latency x bandwidth / sms / (bytes_per_warp_load x ilp)), as an int, with the "
            "latency in seconds")


@check(points=2)
def warps_needed(student, rng, hidden):
    """warps_needed(...) is an int, rounded up, that counts ILP and the fraction of peak."""
    cases = [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": FP32_LOAD,
              "ilp": 1, "fraction": 1.0},  # 79.3 warps: 80
             {"latency_ns": 500.0, "bandwidth": A100_BW, "sms": 108, "bytes_per_warp_load": FLOAT4_LOAD,
              "ilp": 2, "fraction": 0.9}]  # 8.3 warps: 9
    if hidden:
        cases = cases + [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": FP32_LOAD,
                  "ilp": 4, "fraction": 0.5},
                 {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": FP32_LOAD,
                  "ilp": 1, "fraction": 0.0}]
        while len(cases) < 16:
            case = _chip_case(rng) | {"ilp": int(rng.integers(1, 9)), "fraction": float(rng.uniform(0.05, 1))}
            if _clear_of_integers(case):
                cases.append(case)
    compare_cases(student, "warps_needed", cases, _ref_warps, returns="integer", hidden=hidden, hint=_warps_hint)


def _ilp_configs(rng, hidden) -> list[dict]:
    configs = [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": FP32_LOAD,
                "fraction": 1.0},
               {"latency_ns": 500.0, "bandwidth": A100_BW, "sms": 108, "bytes_per_warp_load": FLOAT4_LOAD,
                "fraction": 0.9}]
    if hidden:
        configs = list(configs)
        target = len(configs) + 6
        while len(configs) < target:
            config = _chip_case(rng) | {"fraction": float(rng.uniform(0.05, 1))}
            if all(_clear_of_integers(config | {"ilp": ilp}) for ilp in (1, 2, 4, 8)):
                configs.append(config)
    return configs


@check(points=1)
def more_ilp_fewer_warps(student, rng, hidden):
    """For ILP 1, 2, 4, 8 the student's warp counts never grow, reach the target, and one warp fewer would not."""
    for number, config in enumerate(_ilp_configs(rng, hidden), 1):
        label = f"{'hidden ' if hidden else ''}configuration {number}: " + unredacted(
            ", ".join(f"{k}={v!r}" for k, v in config.items()), "(hidden)")
        counts = [student.call("warps_needed", returns="integer", ilp=ilp, **config) for ilp in (1, 2, 4, 8)]
        if any(later > earlier for earlier, later in zip(counts, counts[1:])):
            raise CheckFailure(f"{label}: warps_needed for ilp = 1, 2, 4, 8 gave {shown(counts)}: more independent "
                               "loads per warp put more bytes in flight per warp, so the warps needed can only fall")
        target = config["fraction"] * config["bandwidth"]
        for ilp, warps in zip((1, 2, 4, 8), counts):
            def reached(w):
                return config["sms"] * w * ilp * config["bytes_per_warp_load"] / (config["latency_ns"] * NS)
            # the same 1e-9 as RTOL: the cases keep every exact count 1e-6 away from a whole number
            if reached(warps) < target * (1 - 1e-9):
                raise CheckFailure(f"{label}, ilp={ilp}: {shown(warps)} warps per SM keep too few bytes in flight "
                                   "to reach the fraction of the bandwidth asked for (round up, and count every "
                                   "load in flight)")
            if warps > 0 and reached(warps - 1) >= target * (1 + 1e-9):
                raise CheckFailure(f"{label}, ilp={ilp}: {shown(warps)} warps per SM is more than needed: one "
                                   "fewer still reaches the target (is the latency in seconds, and is ilp "
                                   "counted?)")


def _reached_hint(case, got, expected) -> str:
    if isinstance(got, (int, float)) and got > case["bandwidth"]:
        return "above the peak: no number of loads in flight makes memory faster than its bandwidth; cap it there"
    return "bandwidth = min(peak, sms x warps x ilp x bytes_per_warp_load / latency in seconds)"


@check(points=1)
def bandwidth_reached(student, rng, hidden):
    """bandwidth_reached(...) is bytes in flight over the latency, capped at the peak."""
    cases = [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "warps_per_sm": 32,
              "bytes_per_warp_load": FP32_LOAD, "ilp": 1},  # under the peak
             {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "warps_per_sm": 64,
              "bytes_per_warp_load": FLOAT4_LOAD, "ilp": 1},  # at the peak
             {"latency_ns": 500.0, "bandwidth": A100_BW, "sms": 108, "warps_per_sm": 16,
              "bytes_per_warp_load": FP32_LOAD, "ilp": 4}]
    if hidden:
        cases = cases + [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "warps_per_sm": 0,
                  "bytes_per_warp_load": FP32_LOAD, "ilp": 1},
                 {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "warps_per_sm": 64,
                  "bytes_per_warp_load": FLOAT4_LOAD, "ilp": 8}]
        cases += [_chip_case(rng) | {"warps_per_sm": int(rng.integers(0, 65)), "ilp": int(rng.integers(1, 9))}
                  for _ in range(10)]
    compare_cases(student, "bandwidth_reached", cases, _ref_reached, returns="number", hidden=hidden,
                  tolerance=RTOL, hint=_reached_hint)


RESIDENT_VISIBLE = [{"threads_per_block": 256, "registers_per_thread": 32},  # full: 64 warps
                    {"threads_per_block": 256, "registers_per_thread": 128},  # 16 warps
                    {"threads_per_block": 128, "registers_per_thread": 100}]  # 100 -> 104 registers allocated


def _resident_hint(case, got, expected) -> str:
    r = case["registers_per_thread"]
    if r % 8 and isinstance(got, int) and got > expected:
        return (f"registers go to a warp in units of 256 ({unredacted(str(r), 'these')} registers per thread are "
                "allocated as the next multiple of 8): round registers_per_warp up to a multiple of 256")
    return ("resident warps = min(by registers, 64 // w, 32) blocks x w warps; by registers = "
            "(16384 // registers_per_warp) * 4 // w, or 0 above the per-block limit")


@check(points=1)
def resident_warps(student, rng, hidden):
    """resident_warps(threads_per_block, registers_per_thread) on an H100 SM, as aisys.occupancy computes it."""
    cases = RESIDENT_VISIBLE
    if hidden:
        cases = cases + [{"threads_per_block": 1024, "registers_per_thread": 64},  # exactly the per-block limit
                 {"threads_per_block": 1024, "registers_per_thread": 65},  # over it: no block at all
                 {"threads_per_block": 32, "registers_per_thread": 16},  # the 32-block limit
                 {"threads_per_block": 32, "registers_per_thread": 255},
                 {"threads_per_block": 96, "registers_per_thread": 80}]  # 3 warps: sub-partitions matter
        cases += [{"threads_per_block": 32 * int(rng.integers(1, 33)),
                   "registers_per_thread": int(rng.integers(1, 256))} for _ in range(16)]
    compare_cases(student, "resident_warps", cases, _ref_resident, returns="integer", hidden=hidden,
                  hint=_resident_hint)


def _at_registers_hint(student):
    """hint(case, got, expected): the student's resident_warps when it is wrong for the case (the bandwidth rests on
    it), else whether the result is a full SM's."""
    def hint(case, got, expected) -> str:
        arguments = {k: case[k] for k in ("threads_per_block", "registers_per_thread")}
        try:
            theirs = student.call("resident_warps", returns="integer", **arguments)
        except CheckFailure:
            theirs = None
        if theirs != _ref_resident(**arguments):
            return "your resident_warps is wrong for this block, and the bandwidth rests on it: fix it first"
        full = _ref_reached(case["latency_ns"], case["bandwidth"], case["sms"], H100.max_warps_per_sm,
                            case["bytes_per_warp_load"], case["ilp"])
        if isinstance(got, (int, float)) and math.isclose(got, full, rel_tol=1e-9) and expected < full:
            return ("that is the bandwidth of a full SM (64 warps): the registers allow fewer warps; use "
                    "resident_warps(threads_per_block, registers_per_thread)")
        return "bandwidth_reached(latency_ns, bandwidth, sms, resident_warps(...), bytes_per_warp_load, ilp)"
    return hint


@check(points=1)
def bandwidth_at_registers(student, rng, hidden):
    """bandwidth_at_registers(...) is bandwidth_reached with the warps the registers allow."""
    cases = [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "threads_per_block": 256,
              "registers_per_thread": 128, "bytes_per_warp_load": FP32_LOAD, "ilp": 1},  # 16 warps: a fifth of peak
             {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "threads_per_block": 256,
              "registers_per_thread": 32, "bytes_per_warp_load": FLOAT4_LOAD, "ilp": 1},  # full SM, float4: peak
             {"latency_ns": 500.0, "bandwidth": A100_BW, "sms": 108, "threads_per_block": 128,
              "registers_per_thread": 100, "bytes_per_warp_load": FP32_LOAD, "ilp": 4}]
    if hidden:
        cases = cases + [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "threads_per_block": 1024,
                  "registers_per_thread": 65, "bytes_per_warp_load": FP32_LOAD, "ilp": 1}]  # nothing resident
        cases += [_chip_case(rng) | {"threads_per_block": 32 * int(rng.integers(1, 33)),
                                     "registers_per_thread": int(rng.integers(1, 256)), "ilp": int(rng.integers(1, 9))}
                  for _ in range(12)]
    compare_cases(student, "bandwidth_at_registers", cases, _ref_at_registers, returns="number", hidden=hidden,
                  tolerance=RTOL, hint=_at_registers_hint(student))


@check(points=1)
def registers_cap_bandwidth(student, rng, hidden):
    """Sweeping registers per thread: the student's bandwidth never grows with registers and is bandwidth_reached at
    the student's resident_warps."""
    configs = [{"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "threads_per_block": 256,
                "bytes_per_warp_load": FP32_LOAD, "ilp": 2}]
    if hidden:
        configs = configs + [_chip_case(rng) | {"threads_per_block": 32 * int(rng.integers(1, 33)),
                                      "ilp": int(rng.integers(1, 5))} for _ in range(3)]
    sweep = (16, 32, 40, 64, 72, 96, 100, 128, 168, 200, 255)
    for number, config in enumerate(configs, 1):
        label = f"{'hidden ' if hidden else ''}configuration {number}: " + unredacted(
            ", ".join(f"{k}={v!r}" for k, v in config.items()), "(hidden)")
        got = [student.call("bandwidth_at_registers", returns="number", registers_per_thread=r, **config)
               for r in sweep]
        for r, earlier, later in zip(sweep[1:], got, got[1:]):
            # 1e-9: equal values computed alike may still differ by rounding
            if later > earlier * (1 + 1e-9):
                raise CheckFailure(f"{label}: bandwidth_at_registers grew when registers_per_thread rose to "
                                   f"{r}: more registers per thread never let more warps fit")
        for r, value in zip(sweep, got):
            warps = student.call("resident_warps", returns="integer", threads_per_block=config["threads_per_block"],
                                 registers_per_thread=r)
            theirs = student.call("bandwidth_reached", returns="number", warps_per_sm=warps,
                                  **{k: v for k, v in config.items() if k != "threads_per_block"})
            if not math.isclose(value, theirs, rel_tol=1e-9):  # as RTOL
                raise CheckFailure(f"{label}, registers_per_thread={r}: bandwidth_at_registers gave "
                                   f"{shown(value, '.4g')} bytes/s, but bandwidth_reached at your resident_warps "
                                   f"({shown(warps)} warps) gives {shown(theirs, '.4g')}: the registers decide how "
                                   "many warps are in flight, and so the bandwidth")


def _amdahl_hint(case, got, expected) -> str:
    s, p = case["serial_fraction"], case["p"]
    if isinstance(got, (int, float)) and math.isclose(got, 1 / ((1 - s) + s / p), rel_tol=1e-9) and got != expected:
        return "s and 1 - s are swapped: the serial part s does not shrink with p, the parallel part 1 - s does"
    if isinstance(got, (int, float)) and math.isclose(got, s + p * (1 - s), rel_tol=1e-9):
        return "that is Gustafson's scaled speed-up; Amdahl's problem stays the same size: 1 / (s + (1 - s) / p)"
    return "speed-up = 1 / (s + (1 - s) / p)"


def _fraction_cases(rng, count) -> list[dict]:
    return [{"serial_fraction": float(rng.uniform(0, 1)), "p": int(2 ** rng.uniform(1, 14))} for _ in range(count)]


@check(points=1)
def amdahl_speedup(student, rng, hidden):
    """amdahl_speedup(s, p) = 1 / (s + (1 - s) / p), from s = 0 (p) to s = 1 (1)."""
    cases = [{"serial_fraction": 0.05, "p": 100}, {"serial_fraction": 0.0, "p": 64},
             {"serial_fraction": 1.0, "p": 64}, {"serial_fraction": 0.3, "p": 1}]
    if hidden:
        cases = cases + [{"serial_fraction": 0.01, "p": 10**6}, {"serial_fraction": 0.5, "p": 2}]
        cases += _fraction_cases(rng, 10)
    compare_cases(student, "amdahl_speedup", cases, latency.amdahl_speedup, returns="number", hidden=hidden,
                  tolerance=RTOL, hint=_amdahl_hint)


def _gustafson_hint(case, got, expected) -> str:
    s, p = case["serial_fraction"], case["p"]
    if isinstance(got, (int, float)) and math.isclose(got, 1 / (s + (1 - s) / p), rel_tol=1e-9):
        return ("that is Amdahl's speed-up of a fixed problem; Gustafson's problem grows with p, and one processor "
                "would take s + p (1 - s) times as long")
    return "scaled speed-up = s + p (1 - s)"


@check(points=1)
def gustafson_speedup(student, rng, hidden):
    """gustafson_speedup(s, p) = s + p (1 - s)."""
    cases = [{"serial_fraction": 0.05, "p": 100}, {"serial_fraction": 0.0, "p": 64},
             {"serial_fraction": 1.0, "p": 64}, {"serial_fraction": 0.3, "p": 1}]
    if hidden:
        cases = cases + [{"serial_fraction": 0.01, "p": 10**6}, {"serial_fraction": 0.5, "p": 2}]
        cases += _fraction_cases(rng, 10)
    compare_cases(student, "gustafson_speedup", cases, latency.gustafson_speedup, returns="number", hidden=hidden,
                  tolerance=RTOL, hint=_gustafson_hint)


def _karp_flatt_hint(case, got, expected) -> str:
    speedup, p = case["speedup"], case["p"]
    if isinstance(got, (int, float)) and math.isclose(got, (1 / speedup - p) / (1 - p), rel_tol=1e-9):
        return "p where 1/p belongs: the parallel part of the time on p processors is (1 - e) / p"
    return "e = (1/speedup - 1/p) / (1 - 1/p): the s for which Amdahl's law gives the measured speed-up"


@check(points=1)
def karp_flatt(student, rng, hidden):
    """karp_flatt(speedup, p) inverts Amdahl's law: 0 for a perfect speed-up, 1 for none, < 0 super-linear."""
    cases = [{"speedup": latency.amdahl_speedup(0.05, 100), "p": 100}, {"speedup": 8.0, "p": 8},
             {"speedup": 1.0, "p": 16}, {"speedup": 10.0, "p": 8}]
    if hidden:
        cases = cases + [{"speedup": 1.9, "p": 2}, {"speedup": 3000.0, "p": 4096}]
        for _ in range(10):
            p = int(2 ** rng.uniform(1, 12))
            cases.append({"speedup": float(rng.uniform(1, 1.2 * p)), "p": p})
    # near 0 the formula subtracts nearly equal numbers: an absolute floor of 1e-12 on a fraction of order 1
    compare_cases(student, "karp_flatt", cases, latency.karp_flatt, returns="number", hidden=hidden,
                  tolerance=(1e-9, 1e-12), hint=_karp_flatt_hint)


REFUSALS = [  # (function, arguments, the argument the message must name)
    ("bytes_in_flight", {"latency_ns": 0.0, "bandwidth": H100_BW}, "latency_ns"),
    ("bytes_in_flight", {"latency_ns": -89.0, "bandwidth": 131e9}, "latency_ns"),
    ("warps_needed", {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": 128,
                      "fraction": 1.5}, "fraction"),
    ("warps_needed", {"latency_ns": 400.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": 128,
                      "fraction": -0.1}, "fraction"),
    ("warps_needed", {"latency_ns": -1.0, "bandwidth": H100_BW, "sms": 132, "bytes_per_warp_load": 128},
     "latency_ns"),
    ("bandwidth_reached", {"latency_ns": 0.0, "bandwidth": H100_BW, "sms": 132, "warps_per_sm": 64,
                           "bytes_per_warp_load": 128}, "latency_ns"),
    ("amdahl_speedup", {"serial_fraction": 1.2, "p": 8}, "serial_fraction"),
    ("amdahl_speedup", {"serial_fraction": -0.5, "p": 8}, "serial_fraction"),
    ("gustafson_speedup", {"serial_fraction": 2.0, "p": 8}, "serial_fraction"),
    ("karp_flatt", {"speedup": 1.0, "p": 1}, "p"),
]


@check(points=1)
def refusals(student, rng, hidden):
    """Non-positive latencies, fractions outside [0, 1] and p < 2 in karp_flatt raise ValueError naming the argument
    (the same fixed cases hidden or not: they hold no data to keep)."""
    for function, arguments, name in REFUSALS:
        call = f"{function}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
        got = student.call("refusal", called=function, returns="any", **arguments)
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError naming {name}")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {shown(got[0] if isinstance(got, list) and got else got)}; it should "
                               f"raise ValueError naming {name}")
        if not re.search(rf"\b{name}\b", str(got[1])):
            raise CheckFailure(f"{call} raised ValueError, but its message should name the argument `{name}`"
                               + unredacted(f"; it says {got[1]!r}"))

