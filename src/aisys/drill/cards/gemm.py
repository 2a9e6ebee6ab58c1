"""GEMM optimisation: tiling and the reuse it buys at each level, the registers and shared memory a tile costs,
waves over the SMs and split-K (aisys.gemm_tiling, as CUTLASS tiles a GEMM)."""

import math

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.gemm_tiling import (H100_REGISTERS_PER_SM, MAX_REGISTERS_PER_THREAD, Tiling, asymptotic_intensity,
                               resources, split_k, tile_reads, traffic)
from aisys.hardware import CHIPS
from aisys.occupancy import H100 as H100_SM

from ..card import Ask, Number, Several, card

TILING = "03-tensor-cores/tiling"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
# CUTLASS's default sm80 Tensor Core tiling for bf16 (the tiling page's second example).
TENSOR_CORE_TILING = Tiling(BM=128, BN=256, BK=64, WM=64, WN=64, TM=16, TN=8, stages=3)


@card(topic="matmul", difficulty="medium", frequency="high", page=TILING)
def block_tile_intensity():
    tile = 128
    intensity = asymptotic_intensity(tile, tile, "bf16")
    return Ask(
        f"A BF16 GEMM is tiled so that each thread block computes a {tile} x {tile} tile of C, loading the rows "
        "of A and columns of B it needs from global memory. For a large GEMM, how many FLOPs does it do per byte "
        "loaded from global memory?",
        Number(intensity, rel=0.03, unit="FLOP/byte"),
        f"Per step of k the block reads {tile} values of A and {tile} of B ({2 * tile} x "
        f"{bytes_per_element('bf16'):g} bytes) and does {tile} x {tile} multiply-adds: 2 t^2 / (2 t b) = t / b = "
        f"{intensity:.0f} FLOP/byte for t = {tile}, b = {bytes_per_element('bf16'):g}. Reuse grows with the tile and "
        f"nothing else. It is below the H100's ridge of {H100.ridge_point('bf16'):.0f}: the L2 cache, which serves "
        "panels that neighbouring blocks loaded a moment before, makes up the rest.")


@card(topic="matmul", difficulty="hard", frequency="medium", page=TILING)
def rereads_of_a():
    n = 4096
    tile = 128
    reads = tile_reads(n, n, n, tile, tile)
    once = 2 * n * n
    return Ask(
        f"In a {n} x {n} x {n} GEMM with {tile} x {tile} block tiles, how many times is each element of A loaded "
        "from global memory, in all?",
        Number(reads / once, rel=0.01, unit="times"),
        f"A block loads its {tile} rows of A across all of K, and there are {n} / {tile} = {n // tile} blocks along "
        f"N that need the same rows: each element of A (and of B) is loaded {reads // once} times. In all "
        f"{reads:,} elements against {once:,} read once each: tiling divides the naive 2 M N K loads by the tile "
        "size, it does not reach the minimum.")


@card(topic="matmul", difficulty="medium", frequency="medium", page=TILING)
def accumulator_registers_per_thread():
    tiling = Tiling(BM=128, BN=128, BK=32, WM=64, WN=32, TM=8, TN=8, stages=2)
    used = resources(tiling, "bf16")
    return Ask(
        f"A thread block of {tiling.threads} threads owns a {tiling.BM} x {tiling.BN} tile of C, accumulated in FP32 "
        "registers spread evenly over its threads. How many registers per thread do the accumulators alone take?",
        Number(used.accumulator_registers, rel=0.01, unit="registers"),
        f"{tiling.BM} x {tiling.BN} = {tiling.BM * tiling.BN:,} FP32 accumulators over {tiling.threads} threads: "
        f"{used.accumulator_registers} each, of the {MAX_REGISTERS_PER_THREAD} a thread may have; operand fragments "
        f"and addresses come on top. The block's accumulators alone take "
        f"{used.accumulator_registers * tiling.threads:,} of the SM's {H100_REGISTERS_PER_SM:,} registers: GEMM "
        "kernels trade occupancy for large tiles.")


@card(topic="matmul", difficulty="hard", frequency="medium", page=TILING)
def wave_quantization():
    n, tile = 4096, 128
    tiles = (n // tile) ** 2
    waves = math.ceil(tiles / H100_SM.sms)
    last = tiles - (waves - 1) * H100_SM.sms
    return Ask(
        f"A {n} x {n} output is computed in {tile} x {tile} tiles, one block per SM at a time, on an H100 "
        f"({H100_SM.sms} SMs). What fraction of the SM-time is used (in %), counting the idle SMs of the last wave?",
        Number(100 * tiles / (waves * H100_SM.sms), rel=0.01, unit="%"),
        f"({n} / {tile})^2 = {tiles:,} tiles over {H100_SM.sms} SMs: {waves} waves, the last with {last} tiles. "
        f"{tiles:,} / ({waves} x {H100_SM.sms}) = {prose.percent(tiles, waves * H100_SM.sms, 1)}. A size just above "
        "a multiple of the wave wastes most of a wave; CUTLASS and cuBLAS pick tile sizes, split-K or a "
        "persistent stream-K schedule to avoid it.")


@card(topic="matmul", difficulty="hard", frequency="low", page=TILING)
def split_k_blocks():
    m = n = 256
    k = 65536
    tiling = TENSOR_CORE_TILING
    plain = split_k(m, n, k, "bf16", tiling, 1)
    splits = 32
    split = split_k(m, n, k, "bf16", tiling, splits)
    return Ask(
        f"A {m} x {n} x {k} BF16 GEMM uses {tiling.BM} x {tiling.BN} block tiles on an H100 ({H100_SM.sms} SMs). "
        f"With split-K into {splits} slices of K, how many blocks does the GEMM launch?",
        Number(split["blocks"], rel=0.01, unit="blocks"),
        f"Without splitting, C has only {plain['blocks']} tiles: {plain['blocks']} blocks for {H100_SM.sms} SMs, "
        f"each walking K = {k:,}. Split-K gives each of {splits} blocks per tile a slice of "
        f"{split['k_per_split']:,}: {split['blocks']} blocks. The price: each split writes its {m} x {n} FP32 "
        f"partial sums and a reduction reads them back, {prose.rate(split['workspace_bytes'], 'B')}, small next "
        f"to the {prose.rate((m + n) * k * bytes_per_element('bf16'), 'B')} of A and B.")


@card(topic="matmul", difficulty="medium", frequency="high", page=TILING)
def cutlass_gemm_techniques():
    options = ("a hierarchy of tiles: thread block, warp, Tensor Core instruction",
               "multi-stage asynchronous copies (cp.async, TMA) overlapping loads with MMAs",
               "swizzled shared-memory layouts so that Tensor Core operand loads avoid bank conflicts",
               "fusing the epilogue (bias, activation, scaling) into the GEMM",
               "keeping the whole of C in shared memory between k steps",
               "one thread per element of C, each looping over K")
    return Ask(
        "Which of these does a CUTLASS-style GEMM kernel use?",
        Several(options, frozenset({0, 1, 2, 3})),
        "CUTLASS's GEMM ('Efficient GEMM in CUDA'): each block owns a tile of C and steps through K with slabs of A "
        "and B in shared memory, several stages in flight; warps own sub-tiles and feed the Tensor Cores from "
        "registers (or, with wgmma, from shared memory); layouts are swizzled; the accumulators stay in registers "
        f"and the epilogue applies bias and activation before the one store of C. With the default sm80 tiling "
        f"({TENSOR_CORE_TILING.BM} x {TENSOR_CORE_TILING.BN} x {TENSOR_CORE_TILING.BK}, "
        f"{TENSOR_CORE_TILING.stages} stages) a block needs "
        f"{resources(TENSOR_CORE_TILING, 'bf16').shared_memory / 1024:.0f} KiB of shared memory for its slabs; C "
        "itself never fits there. One thread per output is the naive kernel tiling replaces.")


@card(topic="matmul", difficulty="hard", frequency="medium", page=TILING)
def tensor_core_tiling_global_intensity():
    n = 8192
    cost = traffic(n, n, n, "bf16", TENSOR_CORE_TILING).cost("global")
    t = TENSOR_CORE_TILING
    return Ask(
        f"An {n}^3 BF16 GEMM uses CUTLASS's {t.BM} x {t.BN} block tiles. Counting every load of A and B from global "
        "memory and the store of C, what is its arithmetic intensity at the global level (FLOP/byte)?",
        Number(cost.intensity, rel=0.03, unit="FLOP/byte"),
        f"2 t_m t_n / ((t_m + t_n) b) with t_m = {t.BM}, t_n = {t.BN}, b = {bytes_per_element('bf16'):g}: "
        f"{cost.intensity:.0f} FLOP/byte ({prose.rate(cost.bytes, 'B')} for {prose.rate(cost.flops, 'FLOP')}). "
        f"That is {cost.intensity / H100.ridge_point('bf16'):.2f} of the H100's ridge: from HBM alone the Tensor "
        "Cores would wait. Blocks that run together share panels in L2, so HBM delivers each panel "
        "about once per wave and the kernel still reaches near peak.")
