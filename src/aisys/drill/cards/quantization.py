"""Quantization for inference: fewer bytes per weight and per cached token, what that buys a memory-bound decode,
and the step of a symmetric INT8 grid (aisys.dtypes, aisys.inference)."""

from fractions import Fraction

from aisys import prose
from aisys.dtypes import BITS, bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.cost import step_seconds
from aisys.inference.kv_cache import kv_cache_bytes, max_sequences
from aisys.inference.model import LLAMA_2_7B, LLAMA_2_70B, LLAMA_3_8B

from ..card import Ask, Number, card

PREFILL_DECODE = "07-inference/prefill-decode"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
GB = 10**9


@card(topic="quantization", difficulty="medium", frequency="high", page=PREFILL_DECODE)
def int8_decode_speedup():
    cached = 1024
    bf16 = step_seconds(LLAMA_2_7B, [(1, cached)], H100, "bf16")
    int8 = step_seconds(LLAMA_2_7B, [(1, cached)], H100, "int8")
    return Ask(
        f"Llama-2-7B decodes one sequence ({cached} tokens cached) on an H100. By the roofline, how much faster is a "
        "decode step with weights and KV cache in INT8 than in BF16?",
        Number(bf16 / int8, rel=0.03, unit="x"),
        f"Batch-1 decode is memory-bound: the step reads every weight and the cache once. "
        f"{bytes_per_element('int8'):g} byte per value instead of {bytes_per_element('bf16'):g}: "
        f"{prose.duration(int8)} against {prose.duration(bf16)}, {prose.times(bf16 / int8)}. That is why weight-only "
        "quantization (INT8, INT4, FP8) speeds up decoding even when the arithmetic is done in BF16 after "
        "dequantizing.")


@card(topic="quantization", difficulty="easy", frequency="high", page=PREFILL_DECODE)
def int4_weights_of_a_70b_model():
    weights = LLAMA_2_70B.parameter_count() * bytes_per_element("int4")
    bf16 = LLAMA_2_70B.parameter_count() * bytes_per_element("bf16")
    return Ask(
        "How much memory do the weights of Llama-2-70B take quantized to INT4 (ignoring scales), in GB?",
        Number(weights / GB, rel=0.03, unit="GB"),
        f"{LLAMA_2_70B.parameter_count():,} parameters x {bytes_per_element('int4'):g} bytes = "
        f"{prose.rate(weights, 'B')}, against {prose.rate(bf16, 'B')} in BF16: it fits one "
        f"{prose.rate(H100.memory_bytes, 'B')} H100 with room for the KV cache. Group-wise scales (GPTQ, AWQ) add a "
        "little on top.")


@card(topic="quantization", difficulty="hard", frequency="medium", page="07-inference/kv-cache")
def fp8_kv_cache_capacity():
    config, context = LLAMA_3_8B, 8192
    weights = config.parameter_count() * bytes_per_element("bf16")
    bf16 = max_sequences(config, H100.memory_bytes, weights, context, "bf16")
    fp8 = max_sequences(config, H100.memory_bytes, weights, context, "fp8_e4m3")
    return Ask(
        f"Llama-3-8B (BF16 weights) serves sequences of {context:,} tokens on one H100. With its KV cache in FP8 "
        "instead of BF16, how many sequences fit (ignoring activations)?",
        Number(fp8, rel=0.02, unit="sequences"),
        f"After {prose.rate(weights, 'B')} of weights, {prose.rate(H100.memory_bytes - weights, 'B')} is left. One "
        f"sequence's cache: {prose.rate(kv_cache_bytes(config, context, 1, 'bf16'), 'B')} in BF16, "
        f"{prose.rate(kv_cache_bytes(config, context, 1, 'fp8_e4m3'), 'B')} in FP8. {bf16} sequences fit in BF16, "
        f"{fp8} in FP8: twice the batch, and each decode step reads half the cache bytes.")


@card(topic="quantization", difficulty="medium", frequency="medium", page="03-tensor-cores/mixed-precision")
def int8_symmetric_step():
    largest = 2  # the largest |w| of the tensor
    levels = 2 ** (BITS["int8"] - 1) - 1
    scale = Fraction(largest, levels)
    return Ask(
        f"A weight tensor with values in [-{largest}, {largest}] is quantized to INT8 symmetrically, per tensor "
        f"(scale = max|w| / {levels}, q = round(w / scale)). What is the largest rounding error of a weight?",
        Number(float(scale / 2), rel=0.02, unit=""),
        f"INT8 holds -{levels + 1}..{levels}; symmetric quantization uses ±{levels} so that 0 maps to 0: scale = "
        f"{largest} / {levels} = {float(scale):.5f}. Rounding to the nearest level errs by at most half a step, "
        f"{float(scale / 2):.5f}. One outlier that sets max|w| widens the step for every weight: why per-channel or "
        "group-wise scales, and SmoothQuant for activations.")
