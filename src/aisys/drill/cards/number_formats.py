"""Number formats: bits, range, precision of FP32 to FP8 (aisys.mixed_precision.FORMATS), lost updates, rounding
error, and the memory of mixed-precision training with Adam."""

import math

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.model import LLAMA_2_7B
from aisys.mixed_precision import (ADAM_MIXED_PRECISION_STATES, FORMATS, lost_update, stagnation,
                                   training_bytes_per_parameter, typical_error, unit_roundoff)

from ..card import Ask, Choice, Number, Several, card

PAGE = "03-tensor-cores/mixed-precision"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]


def _layout(name: str) -> str:
    f = FORMATS[name]
    return f"1 sign, {f.exponent_bits} exponent and {f.mantissa_bits} fraction bits"


def _power(x: float) -> str:
    return f"2^{round(math.log2(x))}"


@card(topic="number formats", difficulty="easy", frequency="high", page=PAGE)
def bf16_layout():
    names = ("fp16", "bf16", "tf32", "fp8_e4m3")
    return Ask(
        "How are the 16 bits of a BF16 number split?",
        Choice(tuple(_layout(name) for name in names), names.index("bf16")),
        f"BF16 is the top half of an FP32 ({_layout('fp32')}): {_layout('bf16')}. Same exponent, so the same range "
        f"(largest {FORMATS['bf16'].largest:.3g}), with {FORMATS['bf16'].precision} significant bits. FP16 is "
        f"{_layout('fp16')}: more precision, largest {FORMATS['fp16'].largest:g}. (The other options are FP16, TF32 "
        "and FP8 E4M3.)")


@card(topic="number formats", difficulty="easy", frequency="high", page=PAGE)
def fp16_largest_value():
    f = FORMATS["fp16"]
    bias = 2 ** (f.exponent_bits - 1) - 1
    return Ask(
        "What is the largest finite FP16 value?",
        Number(f.largest, rel=0.001, unit=""),
        f"{f.exponent_bits} exponent bits with bias {bias}; the all-ones exponent is kept for inf and NaN, so the "
        f"largest exponent is {bias}. With all {f.mantissa_bits} fraction bits set: (2 - 2^-{f.mantissa_bits}) x "
        f"2^{bias} = {f.largest:g}. Activations or gradients beyond it overflow to inf, hence loss scaling "
        "and BF16.")


@card(topic="number formats", difficulty="easy", frequency="medium", page=PAGE)
def fp8_e4m3_largest_value():
    f, e5m2 = FORMATS["fp8_e4m3"], FORMATS["fp8_e5m2"]
    bias = 2 ** (f.exponent_bits - 1) - 1
    top = 2**f.exponent_bits - 1 - bias  # the all-ones exponent holds numbers in E4M3
    return Ask(
        "What is the largest finite value of FP8 E4M3?",
        Number(f.largest, rel=0.001, unit=""),
        f"E4M3 ({_layout('fp8_e4m3')}, bias {bias}) has no inf and keeps only S.1111.111 for NaN, so its top "
        f"binade holds numbers, all but the last fraction pattern: {f.largest / 2**top:g} x 2^{top} = "
        f"{f.largest:g}. E5M2 is IEEE-like (inf and NaN in the top exponent), "
        f"largest {e5m2.largest:g}: more range, {f.mantissa_bits - e5m2.mantissa_bits} fraction bit less.")


@card(topic="number formats", difficulty="hard", frequency="low", page=PAGE)
def fp8_e5m2_largest_value():
    f = FORMATS["fp8_e5m2"]
    bias = 2 ** (f.exponent_bits - 1) - 1
    return Ask(
        "What is the largest finite value of FP8 E5M2?",
        Number(f.largest, rel=0.001, unit=""),
        f"{_layout('fp8_e5m2')}, bias {bias}, the top exponent kept for inf and NaN as in IEEE 754: (2 - "
        f"2^-{f.mantissa_bits}) x 2^{bias} = {f.largest:g}, close to FP16's {FORMATS['fp16'].largest:g} (the same "
        f"exponent bits) with {FORMATS['fp16'].mantissa_bits - f.mantissa_bits} fewer fraction bits.")


@card(topic="number formats", difficulty="medium", frequency="high", page=PAGE)
def bf16_epsilon():
    f = FORMATS["bf16"]
    epsilon = 2 * f.unit_roundoff
    return Ask(
        "What is BF16's machine epsilon, the gap between 1 and the next larger BF16 number? (As a decimal.)",
        Number(epsilon, rel=0.01, unit=""),
        f"Above 1 the values are 1 + k 2^-{f.mantissa_bits}: epsilon = 2^-{f.mantissa_bits} = {epsilon:g} "
        f"(torch.finfo(torch.bfloat16).eps). Rounding errs by at most half of it, the unit roundoff "
        f"u = {_power(f.unit_roundoff)}. FP16's epsilon is 2^-{FORMATS['fp16'].mantissa_bits}, FP32's "
        f"2^-{FORMATS['fp32'].mantissa_bits}.")


@card(topic="number formats", difficulty="hard", frequency="medium", page=PAGE)
def fp16_counting_stops():
    stop = stagnation("fp16")
    return Ask(
        "A loop adds 1 to an FP16 counter that starts at 0. At what value does the counter stop growing?",
        Number(stop, rel=0.001, unit=""),
        f"FP16 has p = {FORMATS['fp16'].precision} significant bits: every integer up to 2^{FORMATS['fp16'].precision}"
        f" = {stop} is exact. There the spacing becomes 2, and {stop} + 1 lies halfway between {stop} and "
        f"{stop + 2}; the tie rounds to the even significand, {stop}. BF16 stops at {stagnation('bf16')}, FP32 at "
        f"{stagnation('fp32'):,}: why sums are accumulated in FP32.")


@card(topic="number formats", difficulty="medium", frequency="high", page=PAGE)
def formats_with_fp32_range():
    names = ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2")
    wide = frozenset(i for i, name in enumerate(names) if FORMATS[name].exponent_bits == FORMATS["fp32"].exponent_bits)
    return Ask(
        "Which of these formats have (about) the same range as FP32?",
        Several(tuple(n.upper() for n in names), wide),
        "Range is set by the exponent bits: " + ", ".join(f"{n.upper()} {FORMATS[n].exponent_bits}" for n in names)
        + f" (FP32 {FORMATS['fp32'].exponent_bits}). BF16 and TF32 keep FP32's exponent, so they overflow where FP32 "
        "does and need no loss scaling; FP16 and the FP8s do not.")


@card(topic="number formats", difficulty="easy", frequency="medium", page=PAGE)
def tf32_facts():
    f = FORMATS["tf32"]
    options = (f"it carries {f.bits} bits: 1 sign, {f.exponent_bits} exponent, {f.mantissa_bits} fraction",
               f"it takes {bytes_per_element('tf32'):g} bytes in memory",
               "it has FP32's range",
               "it halves the memory of an FP32 tensor",
               "Tensor Cores read FP32 inputs as TF32 and add the products in FP32")
    return Ask(
        "Which statements about TF32 are true?",
        Several(options, frozenset({0, 1, 2, 4})),
        f"TF32 is a Tensor Core input format, not a storage format: FP32 data whose fraction the Tensor Core reads "
        f"to {f.mantissa_bits} bits, {f.bits} bits in all, held in 32-bit registers and memory "
        f"({bytes_per_element('tf32'):g} bytes), so it saves no memory. It buys speed: on an H100 "
        f"{prose.rate(H100.peak('tf32'), 'FLOP/s')} against {prose.rate(H100.peak('fp32'), 'FLOP/s')} for FP32 "
        "on the CUDA cores.")


@card(topic="number formats", difficulty="hard", frequency="medium", page=PAGE)
def smallest_update_that_counts():
    weight = 1
    k = next(k for k in range(1, 64) if lost_update(weight, 2**-k, "fp16"))
    survives = 2 ** -(k - 1)
    return Ask(
        "A weight w = 1 is kept in FP16. What is the smallest power of two that, added to it in FP16, changes it? "
        "(As a decimal number.)",
        Number(survives, rel=0.01, unit=""),
        f"Next to 1, FP16 values are 2^-{FORMATS['fp16'].mantissa_bits} apart. An update of 2^-{k} lands exactly "
        f"halfway and the tie rounds back to 1 (even): lost, like every smaller one. 2^-{k - 1} = {survives:g} is "
        "the smallest that counts. A learning rate times a gradient is often smaller, so mixed precision keeps an "
        "FP32 master copy of the weights for the update.")


@card(topic="number formats", difficulty="medium", frequency="medium", page=PAGE)
def fp8_format_for_gradients():
    e4m3, e5m2 = FORMATS["fp8_e4m3"], FORMATS["fp8_e5m2"]
    options = (f"E4M3: more precision (largest {e4m3.largest:g})", f"E5M2: more range (largest {e5m2.largest:g})",
               "either: FP8 training keeps gradients in FP8 only when they fit both",
               "neither: gradients are never stored in FP8")
    return Ask(
        "FP8 training (Micikevicius et al., 'FP8 Formats for Deep Learning') uses which format for gradients?",
        Choice(options, 1),
        f"Gradients span a wider range than weights and activations, so they get E5M2 ({_layout('fp8_e5m2')}, "
        f"largest {e5m2.largest:g}, smallest subnormal {e5m2.smallest_subnormal:.2g}); weights and activations get "
        f"E4M3 ({_layout('fp8_e4m3')}, largest {e4m3.largest:g}, unit roundoff {_power(e4m3.unit_roundoff)} against "
        f"{_power(e5m2.unit_roundoff)}). Both need per-tensor scale factors.")


@card(topic="number formats", difficulty="hard", frequency="low", page=PAGE)
def fp16_smallest_subnormal():
    f = FORMATS["fp16"]
    return Ask(
        "What is the smallest positive FP16 number (a subnormal)? (As a decimal, such as 1.2e-5.)",
        Number(f.smallest_subnormal, rel=0.01, unit=""),
        f"The smallest normal is 2^(1 - bias) = {_power(f.smallest_normal)}; subnormals extend it by the "
        f"{f.mantissa_bits} fraction bits: {_power(f.smallest_subnormal)} = {f.smallest_subnormal:.3g}. Gradients "
        "below it flush to 0 in FP16, which is what loss scaling prevents.")


@card(topic="number formats", difficulty="easy", frequency="medium", page=PAGE)
def bf16_against_fp16_precision():
    ratio = unit_roundoff("bf16") / unit_roundoff("fp16")
    return Ask(
        "How many times larger is BF16's unit roundoff (worst relative rounding error) than FP16's?",
        Number(ratio, rel=0.01, unit="x"),
        f"u = 2^-p: BF16 has p = {FORMATS['bf16'].precision}, u = {_power(unit_roundoff('bf16'))}; FP16 has p = "
        f"{FORMATS['fp16'].precision}, u = {_power(unit_roundoff('fp16'))}: {ratio:g} times. BF16 trades "
        f"{FORMATS['fp16'].mantissa_bits - FORMATS['bf16'].mantissa_bits} fraction bits for "
        f"{FORMATS['bf16'].exponent_bits - FORMATS['fp16'].exponent_bits} exponent bits.")


@card(topic="number formats", difficulty="hard", frequency="low", page=PAGE)
def fp16_accumulation_error():
    k = 4096
    fp16, fp32 = typical_error(k, "fp16"), typical_error(k, "fp32")
    return Ask(
        f"A dot product of length K = {k} of random data is accumulated sequentially in FP16. About what relative "
        "error does it typically have (in %)?",
        Number(100 * fp16, rel=0.05, unit="%"),
        f"Each of the K roundings errs by up to u = {_power(unit_roundoff('fp16'))}; for random data they add like "
        f"a random walk, about sqrt(K) u = {math.isqrt(k)} x {_power(unit_roundoff('fp16'))} = "
        f"{prose.percent(fp16, 1, 1)}. Accumulating in FP32 gives {fp32:.2g}, which is why Tensor Cores take 16-bit "
        "inputs but add in FP32.")


@card(topic="number formats", difficulty="medium", frequency="high", page=PAGE)
def training_memory_with_adam():
    per_parameter = training_bytes_per_parameter()
    parameters = LLAMA_2_7B.parameter_count()
    total = per_parameter * parameters
    return Ask(
        f"How much GPU memory do the weights, gradients and Adam state of Llama-2-7B "
        f"({prose.significant(parameters / 10**9)} B parameters) take in mixed-precision training, before "
        "activations (in GB)?",
        Number(total / 10**9, rel=0.05, unit="GB"),
        "Per parameter: " + ", ".join(f"{name} {bytes_per_element(dtype):g} ({dtype})"
                                      for name, dtype in ADAM_MIXED_PRECISION_STATES)
        + f" = {per_parameter:g} bytes (ZeRO, section 3.1). x {parameters:,} = {prose.rate(total, 'B')}, more than "
        f"an {prose.rate(H100.memory_bytes, 'B')} H100: training a 7B model needs its optimizer state sharded "
        "(ZeRO, FSDP) or offloaded, even before activations.")


@card(topic="number formats", difficulty="medium", frequency="medium", page=PAGE)
def training_state_in_fp32():
    options = tuple(name for name, _ in ADAM_MIXED_PRECISION_STATES)
    return Ask(
        "In mixed-precision training with Adam (FP16 or BF16 compute), which of these are kept in FP32?",
        Several(options, frozenset(i for i, (_, dtype) in enumerate(ADAM_MIXED_PRECISION_STATES) if dtype == "fp32")),
        "The forward and backward passes use 16-bit weights and produce 16-bit gradients; the optimizer works in "
        "FP32 so that small updates are not lost: master weights, Adam's momentum and variance. Bytes per "
        "parameter: " + " + ".join(f"{bytes_per_element(dtype):g}" for _, dtype in ADAM_MIXED_PRECISION_STATES)
        + f" = {training_bytes_per_parameter():g}.")
