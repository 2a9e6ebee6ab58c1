"""INT8 GEMM: how long a K an int32 accumulator holds exactly, where float32 stops being exact, the Tensor Cores'
INT8 rate, the bytes of a W8A8 layer, the zero point's correction term and the rounding of requantization
(aisys.quant.int8_gemm, aisys.hardware)."""

import numpy as np

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.model import LLAMA_3_8B
from aisys.quant import int8_gemm

from ..card import Ask, Choice, Number, card

PAGE = "08-quantization/int8-gemm"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
MB = 10**6


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def int32_accumulator_longest_k():
    longest = int8_gemm.max_k()
    return Ask(
        "An int8 x int8 GEMM sums K products in an int32 accumulator. For the worst codes (int8's full range, "
        "-128 to 127), what is the largest K for which the sum can never overflow int32?",
        Number(longest, rel=0.001, unit=""),
        f"The largest product is -128 x -128 = {128 * 128} = 2**14; int32 holds up to 2**31 - 1, so K <= "
        f"(2**31 - 1) // 2**14 = {longest:,} (K < 2**17). LLM layers have K of a few thousand to tens of thousands: "
        f"int32 is enough. With an activation zero point the codes' differences reach 255 and the bound drops to "
        f"{int8_gemm.max_k(True):,}.")


@card(topic="quantization", difficulty="hard", frequency="medium", page=PAGE)
def float32_accumulator_first_inexact_k():
    product = 127 * 127
    first = (2**24) // product + 1
    return Ask(
        "Someone accumulates an int8 GEMM in float32. With every code equal to 127, what is the smallest K at which "
        "the sum passes 2**24, so that float32 can no longer hold every partial sum exactly?",
        Number(first, rel=0.001, unit=""),
        f"Each product is 127 x 127 = {product:,}. float32 has a 24-bit significand: integers are exact up to "
        f"2**24 = {2**24:,}. {first - 1} products sum to {product * (first - 1):,}, {first} to {product * first:,}, "
        "which is odd and past 2**24: no float32 holds it. An int32 accumulator is exact to 2**31 - 1.")


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def int8_over_bf16_peak_h100():
    ratio = H100.peak("int8") / H100.peak("bf16")
    return Ask(
        "On an H100 SXM, how many times the dense BF16 Tensor Core throughput is the dense INT8 throughput "
        "(datasheet)?",
        Number(ratio, rel=0.02, unit="x"),
        f"{prose.rate(H100.peak('int8'), 'OP/s')} INT8 against {prose.rate(H100.peak('bf16'), 'FLOP/s')} BF16: "
        f"{prose.times(ratio)}. An 8-bit operand is half the bytes, and Hopper's wgmma takes twice the K per "
        "instruction for 8-bit inputs (k32 against k16). FP8 runs at the same rate as INT8.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def w8a8_mlp_layer_bytes():
    K, N = LLAMA_3_8B.d_model, LLAMA_3_8B.d_ff
    weights = K * N * bytes_per_element("int8")
    scales = N * bytes_per_element("fp32")
    return Ask(
        f"Llama-3-8B's MLP up-projection maps {K:,} features to {N:,}. Quantized W8A8 with one float32 scale per "
        "output channel, how many MB does the layer's weight take, scales included?",
        Number((weights + scales) / MB, rel=0.02, unit="MB"),
        f"{K:,} x {N:,} int8 codes = {weights / MB:.2f} MB, plus {N:,} float32 scales = {scales / 10**3:.1f} kB: "
        f"{(weights + scales) / MB:.2f} MB, half of BF16's {K * N * bytes_per_element('bf16') / MB:.1f} MB. The "
        "activations' per-token scales are computed on the fly, one float32 per token.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def zero_point_correction_term():
    options = ("z_a[m] times the column sums of B, precomputed once per weight",
               "z_a[m] times the row sums of A",
               "K z_a z_b, a constant",
               "none: subtract z_a from each code inside the K loop")
    return Ask(
        "C = (A - z_a) B: activations A int8 with a per-token zero point z_a, weights B int8 symmetric (zero point 0). "
        "Written as A B plus corrections, which correction term keeps the K loop a plain int8 GEMM?",
        Choice(options, 0),
        "sum_k (A_mk - z_a[m]) B_kn = sum_k A_mk B_kn - z_a[m] sum_k B_kn (Jacob et al. 2018, eq. 7, with z_b = 0). "
        "The column sums of B are one int32 vector per weight, and the correction is one multiply-add per output "
        "in the epilogue. Subtracting inside the loop works but costs K operations per output, and in int8 "
        "127 - (-128) wraps.")


@card(topic="quantization", difficulty="easy", frequency="medium", page=PAGE)
def requantize_half_to_even():
    acc = np.array([[5]], np.int32)
    one = np.float32(1)
    code = int(int8_gemm.requantize(acc, one / 2, one, one, 0)[0, 0])  # a_scale 1/2: the multiplier is 0.5
    return Ask(
        "An int32 accumulator of 5 is requantized with multiplier a_scale x b_scale / out_scale = 0.5, zero point 0, "
        "rounding half to even. Which int8 code comes out?",
        Number(code, rel=0, abs=0.5, unit=""),
        f"5 x 0.5 = 2.5, an exact half: to even gives {code} (numpy's np.round, IEEE's default), half away from zero "
        "gives 3 (C's round; gemmlowp's rounding shift). A kernel checked bit for bit against a reference must round "
        "as it does.")
