"""The latency-hiding reference: Little's law on the seed's example, warps and occupancy against aisys.occupancy,
Amdahl, Gustafson and Karp-Flatt on their known values and limits, and clear errors on nonsense."""

import math

import pytest
from hypothesis import given, strategies as st

from aisys import latency
from aisys.hardware import chip
from aisys.occupancy import A100, H100, occupancy

H100_CHIP = chip("NVIDIA H100 SXM5 80GB")
COALESCED_FP32 = 32 * 4  # bytes one warp-wide float32 load moves
COALESCED_FLOAT4 = 32 * 16


def test_littles_law_reproduces_the_seeds_cpu_example():
    # 89 ns x 131 GB/s = 11,659 bytes in flight; y = a x + b moves 16 bytes (two doubles) per element, which
    # uses 0.14% of that, and 729 threads with one such access each would fill it.
    in_flight = latency.bytes_in_flight(89e-9, 131e9)
    assert in_flight == pytest.approx(11659)
    assert 16 / in_flight == pytest.approx(0.0014, abs=5e-5)
    assert math.ceil(in_flight / 16) == 729


def test_in_flight_is_a_queue_law_too():
    assert latency.in_flight(rate=200, latency=0.05) == pytest.approx(10)  # 200 requests/s x 50 ms


def test_loads_in_flight_per_sm_share_the_chip_among_sms():
    per_sm = latency.loads_in_flight_per_sm(400e-9, H100_CHIP.memory_bandwidth, H100.sms, 4)
    assert per_sm == pytest.approx(400e-9 * 3.35e12 / 132 / 4)


def test_warps_needed_round_up_and_shrink_with_ilp():
    args = (400e-9, H100_CHIP.memory_bandwidth, H100.sms, COALESCED_FP32)
    exact = 400e-9 * 3.35e12 / 132 / 128  # 79.3 warps
    assert latency.warps_needed(*args) == math.ceil(exact) == 80
    assert isinstance(latency.warps_needed(*args), int)
    assert [latency.warps_needed(*args, ilp=i) for i in (1, 2, 4, 8)] == [80, 40, 20, 10]
    assert latency.warps_needed(*args, fraction=0.5) == 40
    assert latency.warps_needed(*args, fraction=0) == 0
    # more than an SM holds: one float32 load per thread cannot reach peak there
    assert latency.occupancy_needed(400e-9, H100_CHIP.memory_bandwidth, COALESCED_FP32) == 80 / 64 > 1
    assert latency.occupancy_needed(400e-9, H100_CHIP.memory_bandwidth, COALESCED_FLOAT4) == 20 / 64


@given(st.floats(1e-8, 2e-6), st.floats(1e11, 5e12), st.integers(1, 200), st.sampled_from([32, 128, 512]),
       st.integers(1, 8), st.floats(0.01, 1))
def test_warps_needed_reach_the_fraction_and_one_fewer_does_not(lat, bw, sms, size, ilp, fraction):
    warps = latency.warps_needed(lat, bw, sms, size, ilp, fraction)
    target = fraction * bw
    assert sms * warps * ilp * size / lat >= target * (1 - 1e-12)
    assert sms * (warps - 1) * ilp * size / lat < target * (1 + 1e-12)


def test_bandwidth_reached_is_littles_law_capped_at_peak():
    bw = H100_CHIP.memory_bandwidth
    assert latency.bandwidth_reached(400e-9, bw, 132, 32, 128) == pytest.approx(132 * 32 * 128 / 400e-9)
    assert latency.bandwidth_reached(400e-9, bw, 132, 64, 512) == bw
    assert latency.bandwidth_reached(400e-9, bw, 132, 0, 128) == 0
    warps = latency.warps_needed(400e-9, bw, 132, 128, 2)
    assert latency.bandwidth_reached(400e-9, bw, 132, warps, 128, 2) == bw


def test_registers_cap_the_bandwidth_through_occupancy():
    bw = H100_CHIP.memory_bandwidth
    resident = occupancy(256, 128).warps_per_sm  # 128 registers per thread: 16 warps
    assert resident == 16
    capped = latency.bandwidth_at_registers(400e-9, bw, 256, 128, COALESCED_FP32)
    assert capped == pytest.approx(132 * 16 * 128 / 400e-9) and capped < bw / 4
    assert latency.bandwidth_at_registers(400e-9, bw, 256, 32, COALESCED_FLOAT4) == bw
    # ILP buys back what the registers took
    assert latency.bandwidth_at_registers(400e-9, bw, 256, 128, COALESCED_FP32, ilp=4) == pytest.approx(4 * capped)
    a100 = chip("NVIDIA A100 SXM4 80GB").memory_bandwidth
    assert latency.bandwidth_at_registers(400e-9, a100, 256, 64, COALESCED_FP32, sm=A100) == pytest.approx(
        108 * 32 * 128 / 400e-9)


def test_amdahl_and_its_limit():
    assert latency.amdahl_speedup(0.0, 64) == 64
    assert latency.amdahl_speedup(1.0, 64) == 1
    assert latency.amdahl_speedup(0.3, 1) == 1
    assert latency.amdahl_speedup(0.05, 100) == pytest.approx(1 / (0.05 + 0.95 / 100))
    assert latency.amdahl_speedup(0.05, 10**9) == pytest.approx(latency.amdahl_limit(0.05), rel=1e-6)
    assert latency.amdahl_limit(0.05) == pytest.approx(20)
    assert latency.amdahl_limit(0) == math.inf


def test_gustafson_grows_linearly_and_meets_amdahl_at_the_ends():
    assert latency.gustafson_speedup(0.05, 100) == pytest.approx(95.05)
    assert latency.gustafson_speedup(0.0, 64) == 64 == latency.amdahl_speedup(0.0, 64)
    assert latency.gustafson_speedup(1.0, 64) == 1
    assert latency.gustafson_speedup(0.3, 1) == 1
    assert latency.gustafson_speedup(0.05, 100) > latency.amdahl_speedup(0.05, 100)


@given(st.floats(0, 0.99), st.integers(2, 4096))
def test_karp_flatt_recovers_amdahls_serial_fraction(s, p):
    assert latency.karp_flatt(latency.amdahl_speedup(s, p), p) == pytest.approx(s, abs=1e-9)


def test_karp_flatt_of_perfect_and_superlinear_speedups():
    assert latency.karp_flatt(8, 8) == 0
    assert latency.karp_flatt(1, 8) == pytest.approx(1)
    assert latency.karp_flatt(10, 8) < 0


@pytest.mark.parametrize("call, name", [
    (lambda: latency.bytes_in_flight(0, 1e12), "latency"),
    (lambda: latency.bytes_in_flight(-1e-9, 1e12), "latency"),
    (lambda: latency.bytes_in_flight(1e-7, 0), "bandwidth"),
    (lambda: latency.warps_needed(1e-7, 1e12, 132, 128, fraction=1.5), "fraction"),
    (lambda: latency.warps_needed(1e-7, 1e12, 132, 128, fraction=-0.1), "fraction"),
    (lambda: latency.warps_needed(1e-7, 1e12, 132, 128, ilp=0), "ilp"),
    (lambda: latency.bandwidth_reached(1e-7, 1e12, 132, -1, 128), "warps_per_sm"),
    (lambda: latency.amdahl_speedup(1.2, 8), "serial_fraction"),
    (lambda: latency.amdahl_speedup(float("nan"), 8), "serial_fraction"),
    (lambda: latency.amdahl_speedup(0.1, 0), "p"),
    (lambda: latency.gustafson_speedup(-0.1, 8), "serial_fraction"),
    (lambda: latency.karp_flatt(3.0, 1), "p"),
    (lambda: latency.karp_flatt(0, 8), "speedup"),
])
def test_nonsense_is_refused_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        call()
