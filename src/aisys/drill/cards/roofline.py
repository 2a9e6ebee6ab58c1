"""The roofline: ridge points of real chips per format, where common operations sit, and how a datasheet's peak is
computed (aisys.hardware, aisys.roofline)."""

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS, peak_formula
from aisys.roofline import SOFTMAX_FLOPS_PER_ELEMENT, classify, elementwise, gemm, gemv, softmax

from ..card import Ask, Choice, Number, card

PAGE = "01-architecture/roofline"
H100_NAME = "NVIDIA H100 SXM5 80GB"
H100, H200, A100 = CHIPS[H100_NAME], CHIPS["NVIDIA H200 SXM 141GB"], CHIPS["NVIDIA A100 SXM4 80GB"]
EPYC = CHIPS["AMD EPYC 9654 (Genoa, 96 cores)"]
BF16, FP32 = bytes_per_element("bf16"), bytes_per_element("fp32")


def _ridge_text(chip, dtype: str) -> str:
    return (f"{prose.rate(chip.peak(dtype), 'FLOP/s')} / {prose.rate(chip.memory_bandwidth, 'B/s')} = "
            f"{chip.ridge_point(dtype):.0f} FLOP/byte")


@card(topic="architecture", difficulty="easy", frequency="high", page=PAGE)
def h100_ridge_point_bf16():
    ridge = H100.ridge_point("bf16")
    return Ask(
        "At what arithmetic intensity does a dense BF16 kernel stop being memory-bound on an H100 SXM5 (its "
        "ridge point, in FLOP/byte)?",
        Number(ridge, rel=0.05, unit="FLOP/byte"),
        f"The ridge point is peak compute over memory bandwidth: {_ridge_text(H100, 'bf16')}. A kernel must do "
        f"about {ridge:.0f} FLOPs per byte it moves to or from HBM to be limited by the Tensor Cores rather than "
        "by memory.")


@card(topic="architecture", difficulty="easy", frequency="medium", page=PAGE)
def a100_ridge_point_fp16():
    ridge = A100.ridge_point("fp16")
    return Ask(
        "What is the FP16 Tensor Core ridge point of an A100 SXM4 80GB, in FLOP/byte?",
        Number(ridge, rel=0.05, unit="FLOP/byte"),
        f"{_ridge_text(A100, 'fp16')}, against {H100.ridge_point('fp16'):.0f} on an H100: compute grew faster "
        "than bandwidth from one generation to the next, so more kernels are memory-bound on the newer chip.")


@card(topic="architecture", difficulty="medium", frequency="medium", page=PAGE)
def h200_ridge_point():
    ridge = H200.ridge_point("bf16")
    return Ask(
        "The H200 has the H100's compute with faster HBM3e. What is its BF16 ridge point, in FLOP/byte?",
        Number(ridge, rel=0.05, unit="FLOP/byte"),
        f"{_ridge_text(H200, 'bf16')}, against {H100.ridge_point('bf16'):.0f} on the H100. Memory-bound kernels "
        f"(decode, elementwise) speed up by the bandwidth ratio, "
        f"{prose.times(H200.memory_bandwidth / H100.memory_bandwidth)}; compute-bound GEMMs do not.")


@card(topic="architecture", difficulty="easy", frequency="low", page=PAGE)
def h100_ridge_point_fp32_cores():
    ridge = H100.ridge_point("fp32")
    return Ask(
        "What is the ridge point of an H100 SXM5 for plain FP32 math on its CUDA cores (no Tensor Cores), in "
        "FLOP/byte?",
        Number(ridge, rel=0.05, unit="FLOP/byte"),
        f"{_ridge_text(H100, 'fp32')}. Each roof is per kind of instruction: the same chip's BF16 Tensor Core "
        f"ridge is {H100.ridge_point('bf16'):.0f} and its FP8 one {H100.ridge_point('fp8_e4m3'):.0f}.")


@card(topic="architecture", difficulty="easy", frequency="high", page=PAGE)
def vector_add_intensity():
    cost = elementwise(1, "fp32", inputs=2, outputs=1)
    return Ask(
        "What is the arithmetic intensity of z = x + y in float32 (FLOP per byte of memory traffic)?",
        Number(cost.intensity, rel=0.02, unit="FLOP/byte"),
        f"Per element: 1 FLOP, and 3 x {FP32:g} bytes moved (read x and y, write z): 1 / {cost.bytes:.0f} = "
        f"{prose.significant(cost.intensity)} FLOP/byte, far left of every ridge point: on an H100 it can reach "
        f"at most {prose.rate(H100.memory_bandwidth * cost.intensity, 'FLOP/s')}, "
        f"{prose.percent(H100.memory_bandwidth * cost.intensity, H100.peak('fp32'), 1)} of the FP32 peak.")


@card(topic="matmul", difficulty="easy", frequency="high", page="03-tensor-cores/gemm-intensity")
def square_gemm_is_compute_bound():
    n = 4096
    cost = gemm(n, n, n, "bf16")
    where = classify(cost, H100.peak("bf16"), H100.memory_bandwidth)
    options = ("compute-bound", "memory-bound", "exactly at the ridge point")
    return Ask(
        f"Is a {n} x {n} x {n} BF16 GEMM compute-bound or memory-bound on an H100 SXM5?",
        Choice(options, 0 if where["bound"] == "compute" else 1),
        f"2 x {n}^3 = {prose.rate(cost.flops, 'FLOP')} over at least 3 x {n}^2 x {BF16:g} bytes = "
        f"{prose.rate(cost.bytes, 'B')}: {where['intensity']:.0f} FLOP/byte, above the ridge point of "
        f"{H100.ridge_point('bf16'):.0f}. Intensity grows like n/3 for a square GEMM, so large ones are "
        f"compute-bound: at least {prose.duration(where['seconds'])} on the Tensor Cores.")


@card(topic="matmul", difficulty="easy", frequency="high", page="03-tensor-cores/gemm-intensity")
def gemv_intensity():
    m = k = 4096
    cost = gemv(m, k, "bf16")
    return Ask(
        f"What is the arithmetic intensity of a {m} x {k} BF16 matrix times a vector (GEMV), in FLOP/byte?",
        Number(cost.intensity, rel=0.05, unit="FLOP/byte"),
        f"2 x {m} x {k} FLOPs over the {m} x {k} x {BF16:g} bytes of the matrix (the vectors are tiny): "
        f"{cost.intensity:.2f} FLOP/byte. Each weight is used once, so a GEMV stays near 2 / bytes per element "
        f"whatever its size, against the H100's ridge of {H100.ridge_point('bf16'):.0f}: decoding one sequence "
        "is a GEMV, and it runs at the memory's speed.")


@card(topic="matmul", difficulty="medium", frequency="medium", page="03-tensor-cores/gemm-intensity")
def gemm_minimum_time():
    n = 8192
    cost = gemm(n, n, n, "bf16")
    where = classify(cost, H100.peak("bf16"), H100.memory_bandwidth)
    return Ask(
        f"What is the least time an H100 SXM5 needs for an {n} x {n} x {n} BF16 GEMM, by the roofline (in ms)?",
        Number(where["seconds"] * 10**3, rel=0.05, unit="ms"),
        f"{prose.rate(cost.flops, 'FLOP')} at {prose.rate(H100.peak('bf16'), 'FLOP/s')} = "
        f"{prose.duration(cost.flops / H100.peak('bf16'))}; the memory roof allows "
        f"{prose.duration(cost.bytes / H100.memory_bandwidth)} for {prose.rate(cost.bytes, 'B')}. The slower "
        f"roof is compute: {prose.duration(where['seconds'])}. Measured GEMMs reach a large fraction of this, "
        "not all: the clock drops under load.")


@card(topic="inference", difficulty="hard", frequency="high", page="03-tensor-cores/gemm-intensity")
def batch_that_reaches_the_ridge():
    d = 4096
    ridge = H100.ridge_point("bf16")
    batch = next(b for b in range(1, 4 * d) if gemm(b, d, d, "bf16").intensity >= ridge)
    return Ask(
        f"Decoding multiplies a batch of B token vectors by a {d} x {d} BF16 weight matrix (a GEMM with M = B). "
        "What is the smallest B at which this is compute-bound on an H100 SXM5?",
        Number(batch, rel=0.05, unit="sequences"),
        f"Intensity = 2 B d^2 / (2 (d^2 + 2 B d)) bytes, about B FLOP/byte while B is much smaller than d: each "
        f"weight read is used once per sequence, and the activations' bytes grow with B too. It first reaches the "
        f"ridge point, {ridge:.0f}, at B = {batch}. "
        "Below that, a decode step costs about the same for any batch (reading the weights), which is why "
        "serving engines batch many sequences.")


@card(topic="architecture", difficulty="medium", frequency="high", page="03-tensor-cores/tensor-cores")
def h100_bf16_peak_formula():
    formula = peak_formula(H100_NAME, "bf16")
    return Ask(
        "How is the H100 SXM5's dense BF16 peak computed? Give it in TFLOP/s.",
        Number(formula.flops / 10**12, rel=0.02, unit="TFLOP/s"),
        f"Units x math units per unit x FLOPs per clock x clock: {formula.explain()}. Each Tensor Core does "
        f"{formula.flops_per_clock // 2} BF16 FMAs per clock (an FMA is 2 FLOPs), at the Tensor Core boost clock; "
        f"the datasheet's figure is {prose.rate(H100.peak('bf16'), 'FLOP/s')} (it also prints twice that 'with "
        "sparsity').")


@card(topic="normalization", difficulty="medium", frequency="low", page=PAGE)
def softmax_intensity():
    rows, cols = 4096, 4096
    cost = softmax(rows, cols, "fp32")
    return Ask(
        "A fused row-wise softmax over a float32 matrix reads it once and writes it once, with "
        f"{SOFTMAX_FLOPS_PER_ELEMENT} FLOPs per element (max, subtract, exp, sum, divide). What is its arithmetic "
        "intensity, in FLOP/byte?",
        Number(cost.intensity, rel=0.05, unit="FLOP/byte"),
        f"{cost.flops / (rows * cols):.0f} FLOPs per element over 2 x {FP32:g} bytes: "
        f"{prose.significant(cost.intensity)} FLOP/byte, far below the H100's FP32 ridge of "
        f"{H100.ridge_point('fp32'):.0f}: softmax, layernorm and every elementwise kernel are memory-bound, so fusing "
        "them (one read, one write) is what speeds them up.")


@card(topic="architecture", difficulty="medium", frequency="low", page=PAGE)
def cpu_ridge_point():
    formula = peak_formula(EPYC.name, "fp64")
    ridge = EPYC.ridge_point("fp64")
    return Ask(
        f"What is the FP64 ridge point of an {EPYC.name} with {EPYC.derivation['memory_bandwidth']} of memory "
        "bandwidth, in FLOP/byte?",
        Number(ridge, rel=0.05, unit="FLOP/byte"),
        f"Peak: {formula.explain()}. Bandwidth: {EPYC.derivation['memory_bandwidth']} = "
        f"{prose.rate(EPYC.memory_bandwidth, 'B/s')}. Ridge: {ridge:.1f} FLOP/byte. CPUs have far lower ridges "
        f"than GPUs (H100 BF16: {H100.ridge_point('bf16'):.0f}) but the same rule: only cache-blocked kernels "
        "reach the compute roof.")
