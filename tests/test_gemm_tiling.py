"""The tiled-GEMM traffic model: counts against a walk over every tile, closed forms, resources, clear errors."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from aisys import dtypes, roofline
from aisys.gemm_tiling import (LEVELS, Tiling, asymptotic_intensity, best_tiling, block_order, fits, resources,
                               split_k, tile_reads, traffic, wave_reads)
from aisys.hardware import chip

H100 = chip("NVIDIA H100 SXM5 80GB")
CUTLASS_SIMT = Tiling(BM=128, BN=128, BK=8, WM=32, WN=64, TM=8, TN=8, stages=2)  # default SGEMM configuration
CUTLASS_SM80 = Tiling(BM=128, BN=256, BK=64, WM=64, WN=64, TM=16, TN=8, stages=3)  # default sm80 Tensor Core GEMM


def _span(start: int, size: int, end: int) -> int:
    """How many of start, ..., start + size - 1 are below end."""
    return max(0, min(start + size, end) - start)


def walked_reads(M, N, K, t: Tiling) -> dict:
    """Elements loaded at each level, by walking blocks, their warps and their thread tiles step by step through K.

    Loads are masked: a tile loads only rows, columns and k that exist, and a tile with no
    output inside C loads nothing.
    """
    reads = dict.fromkeys(LEVELS, 0)
    for block_m in range(0, M, t.BM):
        for block_n in range(0, N, t.BN):
            for k in range(0, K, t.BK):
                depth = _span(k, t.BK, K)
                reads["global"] += depth * (_span(block_m, t.BM, M) + _span(block_n, t.BN, N))
            for warp_m in range(block_m, block_m + t.BM, t.WM):
                for warp_n in range(block_n, block_n + t.BN, t.WN):
                    rows, cols = _span(warp_m, t.WM, M), _span(warp_n, t.WN, N)
                    if rows and cols:
                        reads["shared"] += K * (rows + cols)
                    for thread_m in range(warp_m, warp_m + t.WM, t.TM):
                        for thread_n in range(warp_n, warp_n + t.WN, t.TN):
                            rows, cols = _span(thread_m, t.TM, M), _span(thread_n, t.TN, N)
                            if rows and cols:
                                reads["register"] += sum(rows + cols for _ in range(K))  # one k at a time
    return reads


@st.composite
def tilings(draw):
    TM, TN = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    WM, WN = TM * draw(st.integers(1, 3)), TN * draw(st.integers(1, 3))
    BM, BN = WM * draw(st.integers(1, 3)), WN * draw(st.integers(1, 3))
    return Tiling(BM, BN, draw(st.integers(1, 9)), WM, WN, TM, TN, draw(st.integers(1, 4)))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 20), tilings(), st.sampled_from(sorted(dtypes.BITS)))
def test_counts_match_a_walk_over_every_tile(M, N, K, tiling, dtype):
    walked = walked_reads(M, N, K, tiling)
    counted = traffic(M, N, K, dtype, tiling)
    size = dtypes.bytes_per_element(dtype)
    assert counted.global_reads == walked["global"] * size
    assert counted.shared_reads == walked["shared"] * size
    assert counted.register_reads == walked["register"] * size
    assert counted.c_writes == M * N * size
    assert counted.flops == 2 * M * N * K


def test_tile_reads_rereads_each_panel_once_per_row_or_column_of_tiles():
    assert tile_reads(256, 256, 64, 64, 64) == 256 * 64 * 4 + 64 * 256 * 4
    assert tile_reads(100, 70, 30, 32, 16) == 100 * 30 * 5 + 30 * 70 * 4  # ragged: ceil(70/16) = 5, ceil(100/32) = 4
    assert tile_reads(1, 1, 1, 128, 128) == 2
    assert tile_reads(7, 5, 3, 1, 1) == 2 * 7 * 5 * 3  # no reuse: two loads per multiply-add


@pytest.mark.parametrize("BM, BN", [(128, 128), (128, 256), (64, 32)])
def test_intensity_of_the_loads_is_the_closed_form_when_tiles_divide_C(BM, BN):
    t = Tiling(BM, BN, 32, BM, BN, BM, BN)
    cost = traffic(4096, 4096, 1000, "bf16", t)
    assert cost.flops / cost.global_reads == pytest.approx(asymptotic_intensity(BM, BN, "bf16"), rel=1e-12)
    assert asymptotic_intensity(128, 128, "bf16") == 64.0  # t / b for a square tile
    # with C's store counted, the global intensity approaches the closed form as K grows
    intensities = [traffic(4096, 4096, K, "bf16", t).cost("global").intensity for K in (256, 4096, 1 << 20)]
    assert intensities == sorted(intensities)
    assert intensities[-1] == pytest.approx(asymptotic_intensity(BM, BN, "bf16"), rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000), tilings(),
       st.sampled_from(sorted(dtypes.BITS)))
def test_inner_levels_move_more_and_global_moves_at_least_the_minimum(M, N, K, tiling, dtype):
    cost = traffic(M, N, K, dtype, tiling)
    assert cost.global_reads <= cost.shared_reads <= cost.register_reads
    assert cost.global_reads + cost.c_writes >= roofline.gemm(M, N, K, dtype).bytes


def test_one_block_covering_C_moves_exactly_the_minimum():
    t = Tiling(128, 256, 32, 64, 64, 16, 8)
    for M, N, K, dtype in [(128, 256, 4096, "bf16"), (100, 3, 77, "int4"), (1, 1, 1, "fp32")]:
        assert traffic(M, N, K, dtype, t).cost("global").bytes == roofline.gemm(M, N, K, dtype).bytes


def test_out_dtype_sizes_only_C():
    a = traffic(512, 384, 256, "int8", CUTLASS_SM80)
    b = traffic(512, 384, 256, "int8", CUTLASS_SM80, out_dtype="int32")
    assert (b.global_reads, b.shared_reads, b.register_reads) == (a.global_reads, a.shared_reads, a.register_reads)
    assert b.c_writes == 4 * a.c_writes


def test_gemv_stays_near_one_flop_per_byte_in_bf16_whatever_the_tiling():
    for t in (CUTLASS_SIMT, CUTLASS_SM80, Tiling(256, 128, 64, 64, 64, 16, 8), Tiling(16, 16, 16, 16, 16, 16, 16)):
        intensity = traffic(8192, 1, 8192, "bf16", t).cost("global").intensity
        assert 0.9 < intensity < 1.0
        assert roofline.bound(H100.peak("bf16"), H100.memory_bandwidth, intensity) == "memory"


def test_as_dict_is_plain_and_holds_each_level():
    values = traffic(300, 200, 100, "fp16", CUTLASS_SM80).as_dict()
    assert set(values) == {"flops", "global_reads", "shared_reads", "register_reads", "c_writes",
                           "global_intensity", "shared_intensity", "register_intensity"}
    assert values["shared_intensity"] == values["flops"] / values["shared_reads"]
    assert values["global_intensity"] == values["flops"] / (values["global_reads"] + values["c_writes"])


def test_resources_of_cutlass_default_configurations():
    simt = resources(CUTLASS_SIMT, "fp32")
    assert (simt.threads, simt.shared_memory, simt.accumulator_registers) == (256, 2 * (128 * 8 + 8 * 128) * 4, 64)
    sm80 = resources(CUTLASS_SM80, "bf16")
    assert (sm80.threads, sm80.shared_memory, sm80.accumulator_registers) == (256, 3 * (128 * 64 + 64 * 256) * 2, 128)
    # a block's accumulators are BM x BN registers however many threads share them
    assert sm80.accumulator_registers * sm80.threads == 128 * 256


def test_accumulators_round_up_and_fp64_takes_two_registers():
    assert resources(Tiling(4, 4, 4, 4, 4, 1, 1), "fp16").accumulator_registers == 1  # 16 values over 32 threads
    assert resources(Tiling(8, 12, 4, 8, 12, 1, 1), "fp32").accumulator_registers == 3  # 96 / 32
    assert resources(Tiling(8, 10, 4, 8, 10, 1, 1), "fp32").accumulator_registers == 3  # 80 / 32 = 2.5
    assert resources(CUTLASS_SIMT, "fp64").accumulator_registers == 128
    assert resources(Tiling(64, 64, 16, 32, 32, 8, 8, stages=1), "int4").shared_memory == 1024


def test_best_tiling_takes_the_highest_intensity_that_fits():
    small, large = Tiling(64, 64, 32, 32, 32, 8, 8), Tiling(128, 256, 64, 64, 64, 16, 8, stages=4)
    assert best_tiling(4096, 4096, 4096, "bf16", [small, large], 227 * 1024, 255) == large
    # four stages of the large tile need 192 KiB, more than an A100 block's 163 KiB
    assert best_tiling(4096, 4096, 4096, "bf16", [small, large], 163 * 1024, 255) == small
    assert best_tiling(4096, 4096, 4096, "bf16", [small, large], 227 * 1024, 64) == small  # 128 accumulators


def test_best_tiling_breaks_ties_by_shared_memory_then_order():
    deep, shallow = Tiling(128, 128, 64, 64, 64, 16, 8), Tiling(128, 128, 32, 64, 64, 16, 8)
    assert best_tiling(1024, 1024, 1024, "fp16", [deep, shallow], 1e9, 255) == shallow
    twin = Tiling(128, 128, 32, 32, 128, 16, 8)  # same block tile and shared memory, other warps
    assert best_tiling(1024, 1024, 1024, "fp16", [shallow, twin], 1e9, 255) == shallow
    assert best_tiling(1024, 1024, 1024, "fp16", [twin, shallow], 1e9, 255) == twin
    # on a 96 x 96 C, a 96 x 96 tile and a 128 x 128 tile both load each panel once: a tie
    big, exact = Tiling(128, 128, 32, 64, 64, 16, 8), Tiling(96, 96, 32, 48, 48, 16, 8)
    assert best_tiling(96, 96, 256, "bf16", [big, exact], 1e9, 255) == exact


def test_fits_is_inclusive_at_the_limits():
    used = resources(CUTLASS_SM80, "bf16")
    assert fits(CUTLASS_SM80, "bf16", used.shared_memory, used.accumulator_registers)
    assert not fits(CUTLASS_SM80, "bf16", used.shared_memory - 1, used.accumulator_registers)
    assert not fits(CUTLASS_SM80, "bf16", used.shared_memory, used.accumulator_registers - 1)


def test_block_order_groups_rows_and_reproduces_tritons_example():
    for tiles_m, tiles_n, group_m in [(9, 9, 3), (7, 5, 3), (1, 4, 8), (5, 1, 2)]:
        order = block_order(tiles_m, tiles_n, group_m)
        assert sorted(order) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    assert block_order(3, 4, 1) == [(m, n) for m in range(3) for n in range(4)]  # row-major
    assert block_order(3, 4, 3) == [(m, n) for n in range(4) for m in range(3)]  # column-major

    def blocks_loaded(order, tiles_k=9):  # Triton's tutorial: 9 x 9 tiles, the first 9 outputs
        return tiles_k * (len({m for m, _ in order}) + len({n for _, n in order}))

    assert blocks_loaded(block_order(9, 9, 1)[:9]) == 90
    assert blocks_loaded(block_order(9, 9, 3)[:9]) == 54


def test_wave_reads_lie_between_no_sharing_and_each_element_once():
    for M, N, K, t in [(8192, 8192, 64, CUTLASS_SM80), (1000, 3000, 7, CUTLASS_SIMT), (1, 1, 1, CUTLASS_SM80)]:
        assert wave_reads(M, N, K, t, group_m=8, wave=1) == tile_reads(M, N, K, t.BM, t.BN)
        assert wave_reads(M, N, K, t, group_m=8, wave=10**6) == M * K + K * N
        assert M * K + K * N <= wave_reads(M, N, K, t, group_m=3, wave=132) <= tile_reads(M, N, K, t.BM, t.BN)
    # Triton's tutorial: 9 x 9 tiles, the first wave of 9 loads 90 tiles' worth of A and B row by row, 54 grouped
    t, K = Tiling(16, 16, 16, 16, 16, 16, 16), 9 * 16
    one_tile = 16 * 16
    assert wave_reads(144, 144, K, t, group_m=1, wave=9) == 9 * 90 * one_tile  # 9 waves, like the first
    assert wave_reads(144, 144, K, t, group_m=3, wave=9) == 9 * 54 * one_tile


def test_split_k_multiplies_blocks_and_adds_the_partial_sums():
    t = Tiling(128, 128, 32, 64, 64, 16, 8)
    assert split_k(256, 256, 65536, "bf16", t, 1) == {"blocks": 4, "k_per_split": 65536, "workspace_bytes": 0}
    assert split_k(256, 256, 65536, "bf16", t, 32) == {"blocks": 128, "k_per_split": 2048,
                                                        "workspace_bytes": 2 * 32 * 256 * 256 * 4}
    assert split_k(200, 100, 10, "fp64", t, 3)["k_per_split"] == math.ceil(10 / 3)
    assert split_k(200, 100, 10, "fp64", t, 3)["workspace_bytes"] == 2 * 3 * 200 * 100 * 8


BAD_CALLS = {
    "zero BM": (lambda: Tiling(0, 128, 32, 64, 64, 8, 8), ValueError, "BM must be an integer >= 1"),
    "float BK": (lambda: Tiling(128, 128, 32.0, 64, 64, 8, 8), ValueError, "BK must be an integer >= 1"),
    "bool stages": (lambda: Tiling(128, 128, 32, 64, 64, 8, 8, stages=True), ValueError, "stages must be an integer"),
    "WM not dividing BM": (lambda: Tiling(128, 128, 32, 48, 64, 8, 8), ValueError, "WM must divide BM"),
    "WN not dividing BN": (lambda: Tiling(128, 128, 32, 64, 96, 8, 8), ValueError, "WN must divide BN"),
    "TM not dividing WM": (lambda: Tiling(128, 128, 32, 64, 64, 3, 8), ValueError, "TM must divide WM"),
    "TN not dividing WN": (lambda: Tiling(128, 128, 32, 64, 64, 8, 6), ValueError, "TN must divide WN"),
    "zero M": (lambda: traffic(0, 1, 1, "fp16", CUTLASS_SM80), ValueError, "M must be an integer >= 1"),
    "negative K": (lambda: traffic(1, 1, -4, "fp16", CUTLASS_SM80), ValueError, "K must be an integer >= 1"),
    "unknown dtype": (lambda: traffic(8, 8, 8, "fp12", CUTLASS_SM80), ValueError, "dtype must be one of"),
    "unknown out_dtype": (lambda: traffic(8, 8, 8, "fp16", CUTLASS_SM80, "fp7"), ValueError,
                          "out_dtype: dtype must be one of"),
    "tiling as dict": (lambda: traffic(8, 8, 8, "fp16", CUTLASS_SM80.as_dict()), TypeError, "tiling must be"),
    "tile_m zero": (lambda: tile_reads(8, 8, 8, 0, 8), ValueError, "tile_m must be an integer >= 1"),
    "tile_n float": (lambda: asymptotic_intensity(8, 2.5, "fp16"), ValueError, "tile_n must be an integer >= 1"),
    "unknown level": (lambda: traffic(8, 8, 8, "fp16", CUTLASS_SM80).cost("L2"), ValueError, "level must be one of"),
    "resources of a tuple": (lambda: resources((128, 128), "fp16"), TypeError, "tiling must be"),
    "zero smem_limit": (lambda: fits(CUTLASS_SM80, "fp16", 0, 255), ValueError, "smem_limit must be a finite number"),
    "fractional regs_limit": (lambda: fits(CUTLASS_SM80, "fp16", 1e5, 127.5), ValueError, "regs_limit must be"),
    "no candidates": (lambda: best_tiling(8, 8, 8, "fp16", [], 1e5, 255), ValueError, "candidates must hold"),
    "candidate not a Tiling": (lambda: best_tiling(8, 8, 8, "fp16", [CUTLASS_SM80, {"BM": 1}], 1e5, 255),
                               TypeError, "tiling must be"),
    "nothing fits": (lambda: best_tiling(8, 8, 8, "fp16", [CUTLASS_SM80], 1024, 255), ValueError, "no candidate fits"),
    "zero group_m": (lambda: block_order(4, 4, 0), ValueError, "group_m must be an integer >= 1"),
    "zero wave": (lambda: wave_reads(8, 8, 8, CUTLASS_SM80, 8, 0), ValueError, "wave must be an integer >= 1"),
    "zero splits": (lambda: split_k(8, 8, 8, "fp16", CUTLASS_SM80, 0), ValueError, "splits must be an integer >= 1"),
    "more splits than K": (lambda: split_k(8, 8, 8, "fp16", CUTLASS_SM80, 9), ValueError, "splits must be at most K"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_input_gives_a_clear_error_naming_the_argument(case):
    call, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=message):
        call()
