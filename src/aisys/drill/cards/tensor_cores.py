"""Tensor Cores: what one does per clock, the instruction shapes a warp or warpgroup issues, their peaks against the
CUDA cores, 2:4 sparsity, and the TPU's systolic array (aisys.hardware)."""

import math

from aisys import prose
from aisys.dtypes import BITS
from aisys.hardware import CHIPS, MMA_SHAPES, peak_formula
from aisys.mixed_precision import FORMATS
from aisys.roofline import gemm
from aisys.sparsity import BITS_PER_INDEX, GROUP, KEPT, compressed_bytes, dense_bytes, sparse_gemm

from ..card import Ask, Choice, Number, Several, card

PAGE = "03-tensor-cores/tensor-cores"
H100_NAME, A100_NAME = "NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB"
H100, A100 = CHIPS[H100_NAME], CHIPS[A100_NAME]


def _fma_per_sm_clock(chip: str, dtype: str) -> int:
    formula = peak_formula(chip, dtype)
    return formula.parts * formula.flops_per_clock // 2


@card(topic="tensor cores", difficulty="easy", frequency="high", page=PAGE)
def tensor_cores_against_cuda_cores():
    ratio = H100.peak("bf16") / H100.peak("fp32")
    return Ask(
        "How many times the FP32 (CUDA core) peak is the dense BF16 Tensor Core peak of an H100 SXM5?",
        Number(ratio, rel=0.03, unit="x"),
        f"{prose.rate(H100.peak('bf16'), 'FLOP/s')} against {prose.rate(H100.peak('fp32'), 'FLOP/s')}: "
        f"{prose.times(ratio)}. Per SM and clock the {peak_formula(H100_NAME, 'bf16').parts} Tensor Cores do "
        f"{_fma_per_sm_clock(H100_NAME, 'bf16'):,} BF16 FMAs where the FP32 cores do "
        f"{_fma_per_sm_clock(H100_NAME, 'fp32')}; NVIDIA quotes them at different clocks "
        f"({peak_formula(H100_NAME, 'bf16').ghz:g} and {peak_formula(H100_NAME, 'fp32').ghz:g} GHz). "
        "That gap is why every large matrix product runs on Tensor Cores in a 16- or 8-bit format.")


@card(topic="tensor cores", difficulty="medium", frequency="medium", page=PAGE)
def bf16_fma_per_sm_per_clock():
    formula = peak_formula(H100_NAME, "bf16")
    per_sm = _fma_per_sm_clock(H100_NAME, "bf16")
    return Ask(
        "How many dense BF16 fused multiply-adds do the Tensor Cores of one H100 SM do per clock?",
        Number(per_sm, rel=0.01, unit="FMA/clock"),
        f"{formula.parts} Tensor Cores x {formula.flops_per_clock // 2} FMAs each = {per_sm:,}, twice the A100's "
        f"{_fma_per_sm_clock(A100_NAME, 'bf16'):,} per SM. Times {formula.units} SMs, 2 FLOPs per FMA and "
        f"{formula.ghz:g} GHz: {prose.rate(formula.flops, 'FLOP/s')}.")


@card(topic="tensor cores", difficulty="medium", frequency="medium", page=PAGE)
def mma_sync_shape_for_fp16():
    names = tuple(MMA_SHAPES)
    answer = next(i for i, name in enumerate(names) if "fp16" in MMA_SHAPES[name].dtypes
                  and MMA_SHAPES[name].threads == 32)
    shape = MMA_SHAPES[names[answer]]
    return Ask(
        "Which PTX instruction shape does a warp issue for an FP16 or BF16 Tensor Core multiply on Ampere and later "
        "(what compilers emit for sm_80)?",
        Choice(names, answer),
        f"{shape.instruction}: A is {shape.m} x {shape.k}, B {shape.k} x {shape.n}, C and D {shape.m} x {shape.n}, "
        f"{shape.fmas:,} FMAs per instruction, issued by one warp of {shape.threads} threads (first on "
        f"{shape.arch}). The others: " + "; ".join(
            f"{s.instruction} for {', '.join(s.dtypes)} ({s.threads} threads, {s.arch})"
            for s in MMA_SHAPES.values() if s is not shape) + ".")


@card(topic="tensor cores", difficulty="hard", frequency="medium", page=PAGE)
def wgmma_clocks_per_instruction():
    shape = MMA_SHAPES["wgmma.mma_async.m64n256k16"]
    per_sm = _fma_per_sm_clock(H100_NAME, "bf16")
    return Ask(
        f"One {shape.instruction} (BF16) is issued by a warpgroup. For how many clocks does it keep all the "
        "Tensor Cores of an H100 SM busy?",
        Number(shape.fmas / per_sm, rel=0.01, unit="clocks"),
        f"{shape.m} x {shape.n} x {shape.k} = {shape.fmas:,} FMAs; the SM's Tensor Cores do {per_sm:,} BF16 FMAs per "
        f"clock: {shape.fmas // per_sm} clocks. One instruction issued by {shape.threads} threads covers that many "
        "clocks, which leaves the warps free to issue the TMA loads of the next tiles meanwhile: why Hopper GEMMs "
        "and FlashAttention-3 are built on wgmma.")


@card(topic="tensor cores", difficulty="medium", frequency="low", page=PAGE)
def who_issues_wgmma():
    shape = MMA_SHAPES["wgmma.mma_async.m64n256k16"]
    warp = MMA_SHAPES["mma.sync.m16n8k16"].threads
    options = ("one thread", f"one warp ({warp} threads)",
               f"a warpgroup: {shape.threads // warp} consecutive warps ({shape.threads} threads)",
               "the whole thread block")
    return Ask(
        "Who issues a Hopper wgmma.mma_async instruction?",
        Choice(options, 2),
        f"A warpgroup of {shape.threads // warp} warps, {shape.threads} threads, issues one wgmma of up to "
        f"{shape.m} x {shape.n} x {shape.k}. Its operand B (and optionally A) comes straight from shared memory "
        "through a descriptor, the accumulator lives in the warpgroup's registers, and the instruction is "
        "asynchronous: wgmma.commit_group and wgmma.wait_group order it. Only sm_90a has it; mma.sync is issued "
        f"by one warp of {warp}.")


@card(topic="tensor cores", difficulty="easy", frequency="medium", page="03-tensor-cores/mixed-precision")
def h100_fp8_peak():
    return Ask(
        "What is the dense FP8 (E4M3) Tensor Core peak of an H100 SXM5, in TFLOP/s?",
        Number(H100.peak("fp8_e4m3") / 10**12, rel=0.02, unit="TFLOP/s"),
        f"{peak_formula(H100_NAME, 'fp8_e4m3').explain()}: twice the BF16 peak "
        f"({prose.rate(H100.peak('bf16'), 'FLOP/s')}), since a Tensor Core does twice the 8-bit FMAs per clock. "
        "The datasheet prints twice this again, 'with sparsity'.")


@card(topic="tensor cores", difficulty="medium", frequency="low", page="03-tensor-cores/mixed-precision")
def formats_new_on_hopper():
    names = tuple(H100.peak_flops)
    return Ask(
        "Which of these formats have a peak on the H100 SXM5's datasheet but none on the A100's?",
        Several(tuple(n.upper() for n in names), frozenset(i for i, n in enumerate(names) if n not in A100.peak_flops)),
        f"H100: {', '.join(n.upper() for n in H100.peak_flops)}; A100: {', '.join(n.upper() for n in A100.peak_flops)}"
        ". Hopper added FP8 in both variants, E4M3 and E5M2, at "
        f"{prose.rate(H100.peak('fp8_e4m3'), 'FLOP/s')}; the A100's fastest format is INT8 at "
        f"{prose.rate(A100.peak('int8'), 'OP/s')}.")


@card(topic="tensor cores", difficulty="easy", frequency="medium", page="03-tensor-cores/mixed-precision")
def tf32_speedup_over_fp32():
    ratio = H100.peak("tf32") / H100.peak("fp32")
    return Ask(
        "An FP32 GEMM on an H100 SXM5 is allowed to use TF32 Tensor Cores (torch.backends.cuda.matmul.allow_tf32). "
        "By how much does its peak rise?",
        Number(ratio, rel=0.03, unit="x"),
        f"{prose.rate(H100.peak('tf32'), 'FLOP/s')} in TF32 against {prose.rate(H100.peak('fp32'), 'FLOP/s')} on "
        f"the CUDA cores: {prose.times(ratio)}, for inputs read with {FORMATS['tf32'].mantissa_bits} fraction bits "
        f"instead of {FORMATS['fp32'].mantissa_bits} and products added in FP32. It is "
        f"{prose.times(H100.peak('tf32') / H100.peak('bf16'))} the BF16 rate, since TF32 operands are twice as "
        "wide.")


@card(topic="tensor cores", difficulty="hard", frequency="medium", page="03-tensor-cores/sparsity")
def sparse_compressed_size():
    m = k = 4096
    fraction = compressed_bytes(m, k, "fp16") / dense_bytes(m, k, "fp16")
    dense, sparse = gemm(m, m, k, "fp16"), sparse_gemm(m, m, k, "fp16")
    bits = BITS["fp16"]
    return Ask(
        f"A {m} x {k} FP16 weight matrix is pruned to 2:4 sparsity and compressed for the sparse Tensor Cores. "
        "What fraction of its dense size does it take?",
        Number(fraction, rel=0.01, unit=""),
        f"In every group of {GROUP} values along K, {KEPT} are kept, each with a {BITS_PER_INDEX}-bit index of "
        f"its position: ({KEPT} x {bits} + {KEPT} x {BITS_PER_INDEX}) / ({GROUP} x {bits}) bits = {fraction:g}. "
        f"The sparse Tensor Cores skip the pruned products: {prose.rate(sparse.flops, 'FLOP')} executed against "
        f"{prose.rate(dense.flops, 'FLOP')} dense, the {dense.flops / sparse.flops:g}x of the datasheet's "
        "'with sparsity' figures.")


@card(topic="tensor cores", difficulty="medium", frequency="low", page="03-tensor-cores/systolic")
def tpu_v4_peak():
    formula = peak_formula("Google TPU v4", "bf16")
    side = math.isqrt(formula.flops_per_clock // 2)
    return Ask(
        f"A TPU v4 chip has {formula.units} TensorCores with {formula.parts} matrix units (MXUs) each; an MXU is a "
        f"{side} x {side} systolic array of BF16 multiply-adds at {formula.ghz:g} GHz. What is the chip's peak, in "
        "TFLOP/s?",
        Number(formula.flops / 10**12, rel=0.02, unit="TFLOP/s"),
        f"{formula.explain()}: each MXU does {side} x {side} = {side * side:,} multiply-adds (2 FLOPs each) per "
        f"clock. The published figure is {prose.rate(CHIPS['Google TPU v4'].peak('bf16'), 'FLOP/s')}.")
