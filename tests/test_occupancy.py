"""The occupancy calculator: known cases, each limit, and clear errors.

On an H100 the same arithmetic was checked against the driver's
cuOccupancyMaxActiveBlocksPerMultiprocessor for 2,912 configurations with no
difference (benchmarks/cuda_model.py; book/02-gpu-programming/h100_measurements.json).
"""

import json
from pathlib import Path

import pytest

from aisys.occupancy import A100, H100, max_potential_block_size, occupancy

MEASURED = Path(__file__).parents[1] / "book" / "02-gpu-programming" / "h100_measurements.json"


def test_a_small_kernel_fills_the_sm():
    result = occupancy(256, 32)
    assert (result.blocks_per_sm, result.warps_per_sm, result.occupancy) == (8, 64, 1.0)


def test_registers_are_given_to_warps_in_units_of_256():
    # 33 registers round up to 40 per thread: 1280 per warp, 12 warps per quarter of the register file
    assert occupancy(32, 33).blocks_per_sm == 32
    assert occupancy(1024, 33).blocks_per_sm == 1
    assert occupancy(1024, 33).limiter == "registers"
    assert occupancy(256, 64).occupancy == 0.5


def test_each_limit_can_be_the_one_that_binds():
    assert occupancy(32, 16).limiter == "blocks"  # 32 blocks of one warp: half the warp slots
    assert occupancy(256, 32, 48 * 1024).limiter == "shared memory"
    assert occupancy(256, 32, 48 * 1024).blocks_per_sm == 4  # 228 KB / (48 KB + 1 KB reserved)
    assert occupancy(96, 40).blocks_per_sm == 16
    assert occupancy(1024, 16).limiter == "threads"


def test_blocks_that_cannot_launch_give_zero():
    assert occupancy(1024, 65).blocks_per_sm == 0  # 65 x 1024 registers > 64 K per block
    assert occupancy(64, 256).blocks_per_sm == 0  # more than 255 registers per thread
    assert occupancy(64, 32, 228 * 1024).blocks_per_sm == 0  # over the 227 KB a block may opt in to
    assert occupancy(2048, 16).blocks_per_sm == 0


def test_a100_has_less_shared_memory():
    assert occupancy(256, 32, 40 * 1024, A100).blocks_per_sm == 4  # 164 KB / 41 KB
    assert occupancy(256, 32, 40 * 1024, H100).blocks_per_sm == 5


def test_max_potential_block_size_prefers_the_largest_full_block():
    assert max_potential_block_size(32) == (2 * 132, 1024)
    grid, threads = max_potential_block_size(40, 20000)
    assert occupancy(threads, 40, 20000).blocks_per_sm * threads == max(
        occupancy(t, 40, 20000).blocks_per_sm * t for t in range(32, 1025, 32))


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="threads_per_block"):
        occupancy(0, 32)
    with pytest.raises(ValueError, match="registers_per_thread"):
        occupancy(128, -1)
    with pytest.raises(ValueError, match="shared_per_block"):
        occupancy(128, 32, 1.5)
    with pytest.raises(TypeError, match="sm"):
        occupancy(128, 32, 0, "H100")


def test_the_limits_are_those_the_driver_reported_on_an_h100():
    device = json.loads(MEASURED.read_text())["device"]
    assert device["multiProcessorCount"] == H100.sms
    assert device["regsPerMultiprocessor"] == H100.registers_per_sm
    assert device["sharedMemPerMultiprocessor"] == H100.shared_per_sm
    assert device["sharedMemPerBlockOptin"] == H100.shared_per_block_optin
    assert device["reservedSharedMemPerBlock"] == H100.reserved_shared_per_block
    assert device["maxThreadsPerMultiProcessor"] == H100.max_threads_per_sm
    assert device["maxBlocksPerMultiProcessor"] == H100.max_blocks_per_sm
    assert json.loads(MEASURED.read_text())["occupancy"]["mismatch_count"] == 0
