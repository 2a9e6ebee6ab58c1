"""INT4 weights (W4A16): bits per weight with group scales, the bytes of a 4-bit model, the speed-up a memory-bound
GEMV can get, where it ends, and the words GPTQ and AWQ pack (aisys.quant.int4, aisys.roofline)."""

import numpy as np

from aisys import prose, roofline
from aisys.hardware import CHIPS
from aisys.inference.model import LLAMA_2_7B
from aisys.quant import int4

from ..card import Ask, Choice, Number, card

PAGE = "08-quantization/int4"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
GB = 10**9
GROUP = 128


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def int4_bits_per_weight_g128():
    bits = int4.bits_per_weight(GROUP)
    return Ask(
        f"Weights are stored as 4-bit codes with one fp16 scale and one 4-bit zero point per group of {GROUP} "
        "consecutive weights (GPTQ's and AWQ's usual format). How many bits does a weight cost, all told?",
        Number(bits, rel=0.005, unit="bits"),
        f"4 bits of code plus the group's (16 + 4) bits shared by {GROUP} weights: 4 + 20 / {GROUP} = {bits:.4g}. "
        f"Groups of 32 would cost {int4.bits_per_weight(32):.4g}: smaller groups are more accurate and larger.")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def llama2_7b_bytes_at_w4_g128():
    cfg = LLAMA_2_7B
    linear = cfg.n_layers * (4 * cfg.d_model**2 + 3 * cfg.d_model * cfg.d_ff)
    kept = cfg.parameter_count() - linear
    total = linear * int4.bits_per_weight(GROUP) / 8 + kept * 2
    return Ask(
        f"Llama-2-7B's linear layers ({linear:,} weights) are quantized to 4 bits in groups of {GROUP} (fp16 scale, "
        f"4-bit zero); its embeddings, output layer and norms ({kept:,} parameters) stay fp16. How many GB do the "
        "weights take?",
        Number(total / GB, rel=0.03, unit="GB"),
        f"{linear:,} x {int4.bits_per_weight(GROUP):.4g} / 8 bytes + {kept:,} x 2 bytes = "
        f"{prose.rate(total, 'B')}, against {prose.rate(cfg.parameter_count() * 2, 'B')} in fp16. The fp16 "
        "embedding and output layer are a large part of what is left: 4-bit checkpoints usually keep them.")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def w4a16_gemv_speedup_bound():
    n, k = LLAMA_2_7B.d_ff, LLAMA_2_7B.d_model
    bound = int4.gemv_speedup_bound(1, n, k, GROUP)
    return Ask(
        f"A decode step multiplies one token (fp16, K = {k}) by a weight matrix of N = {n} outputs. By the roofline, "
        f"at most how many times faster is it with 4-bit weights in groups of {GROUP} (fp16 scale, 4-bit zero) "
        "than with fp16 weights?",
        Number(bound, rel=0.03, unit="x"),
        f"At batch 1 both are far left of the ridge point (2 FLOPs per weight), so time = bytes / bandwidth. fp16: "
        f"2 bytes per weight; W4A16: {int4.bits_per_weight(GROUP):.4g} / 8 bytes, plus x and y in fp16 for both: "
        f"{prose.times(bound)}. Not 4: the group's scale and zero cost {20 / GROUP:.3g} bits per weight.")


@card(topic="quantization", difficulty="hard", frequency="medium", page=PAGE)
def when_w4a16_stops_paying():
    n, k = LLAMA_2_7B.d_ff, LLAMA_2_7B.d_model
    ridge = H100.ridge_point("fp16")

    def ratio(m):
        def seconds(cost):
            return roofline.classify(cost, H100.peak("fp16"), H100.memory_bandwidth)["seconds"]

        return seconds(roofline.gemm(m, n, k)) / seconds(roofline.Cost(2 * m * n * k, int4.w4a16_bytes(m, n, k)))

    options = (
        "At batch 2: as soon as each weight is used twice, dequantizing it costs more than it saves.",
        f"Near the fp16 ridge point, a batch of a few hundred tokens (H100: {ridge:.0f} FLOP/byte): there the fp16 "
        "GEMM is compute-bound too, and both wait on the same Tensor Core FLOPs.",
        "Never: reading a quarter of the bytes always makes the 4-bit kernel faster.",
        "At batch 16: beyond it the 4-bit weights no longer fit in the L2 cache.",
    )
    return Ask(
        f"y = x W^T with W of {n} x {k} on an H100, x a batch of M tokens. By the roofline (dequantization left out), "
        "where does a W4A16 kernel stop being faster than the fp16 GEMM?",
        Choice(options, 1),
        f"The weight bytes do not grow with M, the FLOPs do. The 4-bit GEMM reaches the compute roof first (at about "
        f"a quarter of the ridge), the fp16 one near M = {ridge:.0f}; between them the gain shrinks "
        f"({prose.times(ratio(1))} at M = 1, {prose.times(ratio(128))} at 128, {prose.times(ratio(512))} at 512). "
        "Real kernels lose it sooner: "
        "unpacking costs instructions on units the GEMM needs. Large batches favour W8A8 or FP8, whose GEMMs run on "
        "faster Tensor Cores.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def awq_packed_word():
    codes = np.arange(8)[None, :]
    words = {order: int(int4.pack(codes, order)[0, 0]) & 0xFFFFFFFF for order in int4.ORDERS}
    inverse = sum(j << (4 * position) for j, position in enumerate(int4.AWQ_ORDER))  # element j at nibble ORDER[j]
    options = tuple(f"{w:#010x}" for w in (words["sequential"], words["awq"], 0x01234567, inverse))
    return Ask(
        "Codes 0, 1, ..., 7 (element j holds the code j) are packed into one int32 word in AWQ's order, where the "
        f"nibble at bits 4i holds element {list(int4.AWQ_ORDER)}[i]. Which word is it, in hex?",
        Choice(options, 1),
        f"Bits 0-3 hold element 0, bits 4-7 element 2, ... bits 16-19 element 1: {options[1]}. In sequential "
        f"(GPTQ) order it would be {options[0]}. The interleave puts elements (0, 1) at bits 0 and 16, so one "
        "(word & 0x000F000F) | 0x64006400 makes the fp16 pair (1024 + q0, 1024 + q1): two consecutive weights per "
        "lop3, then shift by 4 for the next pair.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def int4_top_nibble_sign():
    word = int(int4.pack(np.full((1, 8), 15))[0, 0])
    return Ask(
        "Eight codes 15 are packed into one int32 word. An unpacker reads the top code as word >> 28, in int32 "
        "(C, CUDA, Triton, torch), without a mask. What does it get?",
        Number(word >> 28, abs=0.5),
        f"The word is {word} (every bit set: a code >= 8 on top sets the sign bit). Shifting a signed int right is "
        f"arithmetic: it copies the sign bit in, so word >> 28 is {word >> 28}, not 15. (word >> 28) & 0xF is 15.")
