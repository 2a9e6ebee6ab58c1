"""Number formats bit by bit (aisys.float_bits): the E4M3 overflow tie, subnormals, NaN codes, BF16 against FP16,
TF32's ties away from zero, and a datasheet's FP32 peak counted from the FMA units."""

import numpy as np

from aisys import float_bits as fb
from aisys.hardware import CHIPS, TERA, peak_formula

from ..card import Ask, Choice, Number, card

PAGE = "01-architecture/number-formats"
PEAKS = "01-architecture/peak-flops"


def _bits(code: int, f: fb.FloatFormat) -> str:
    b = format(int(code) >> f.shift, f"0{1 + f.exponent_bits + f.mantissa_bits}b")
    return f"{b[0]}.{b[1:1 + f.exponent_bits]}.{b[1 + f.exponent_bits:]}"


@card(topic="number formats", difficulty="hard", frequency="medium", page=PAGE)
def e4m3_first_overflow():
    f = fb.FORMATS["fp8_e4m3"]
    step = 2 ** (f.emax - f.mantissa_bits)  # the spacing of the top binade
    tie = f.max_finite + step / 2
    options = (f"anything above {f.max_finite:g}", f"{tie:g} and above", f"anything above {tie:g}",
               f"{f.max_finite + step:g} and above")
    at_tie = fb.encode([tie], f)[0]
    return Ask(
        "Casting to FP8 E4M3 (the 'fn' variant: no inf) with round-to-nearest-even and no saturation, which inputs "
        "become NaN?",
        Choice(options, 2),
        f"The largest E4M3 value is {f.max_finite:g} ({_bits(fb.encode([f.max_finite], f)[0], f)}); the next step, "
        f"{f.max_finite + step:g}, would be {_bits(f.quiet_nan, f)}, E4M3's only NaN. {tie:g} is the tie "
        f"between them and rounds to the even fraction, {f.max_finite:g} ({_bits(at_tie, f)}); anything above it "
        f"rounds to {f.max_finite + step:g}, which overflows: NaN, or {f.max_finite:g} with saturation. ml_dtypes "
        "does exactly this; stacks that saturate by default (ONNX Runtime, Triton, torch's CPU cast since 2026) give "
        f"{f.max_finite:g} instead, hence the reports of a switch between {tie:g} and {tie + 1:g}.")


@card(topic="number formats", difficulty="medium", frequency="medium", page=PAGE)
def e4m3_smallest_subnormal():
    f = fb.FORMATS["fp8_e4m3"]
    return Ask(
        "What is the smallest positive FP8 E4M3 value? (As a decimal, such as 0.0039.)",
        Number(f.smallest_subnormal, rel=0.001),
        f"Bias {f.bias}: the smallest normal is 2^(1 - {f.bias}) = 2^{f.emin} = {f.smallest_normal:g}. Below it the "
        f"subnormals (exponent field 0) keep that binade's spacing, 2^{f.emin} x 2^-{f.mantissa_bits}: the smallest "
        f"is 2^{f.emin - f.mantissa_bits} = {f.smallest_subnormal:.9g} ({_bits(1, f)}). E5M2 reaches "
        f"{fb.FORMATS['fp8_e5m2'].smallest_subnormal:g}: its range is why it carries gradients.")


@card(topic="number formats", difficulty="medium", frequency="low", page=PAGE)
def fp16_nan_codes():
    f = fb.FORMATS["fp16"]
    count = f.nan_codes().size
    return Ask(
        "How many of the 65,536 FP16 bit patterns are NaN?",
        Number(count, rel=0.0001),
        f"The all-ones exponent with a nonzero fraction: 2^{f.mantissa_bits} - 1 fractions x 2 signs = {count:,} "
        f"(the zero fraction is +-inf). BF16 has {fb.FORMATS['bf16'].nan_codes().size}, E5M2 "
        f"{fb.FORMATS['fp8_e5m2'].nan_codes().size}, and E4M3 only {fb.FORMATS['fp8_e4m3'].nan_codes().size} "
        "(S.1111.111): it gives up inf and the other NaNs to hold numbers up to 448.")


@card(topic="number formats", difficulty="easy", frequency="high", page=PAGE)
def bf16_against_fp16_trade():
    bf16, fp16 = fb.FORMATS["bf16"], fb.FORMATS["fp16"]
    options = (f"BF16 reaches {bf16.max_finite:.3g} with epsilon 2^-{bf16.mantissa_bits}; FP16 reaches "
               f"{fp16.max_finite:g} with epsilon 2^-{fp16.mantissa_bits}",
               f"both reach {fp16.max_finite:g}; BF16 has epsilon 2^-{fp16.mantissa_bits}",
               f"BF16 reaches {fp16.max_finite:g} with epsilon 2^-{bf16.mantissa_bits}; FP16 reaches "
               f"{bf16.max_finite:.3g}",
               "they differ only in the exponent bias")
    return Ask(
        "BF16 and FP16 both take 16 bits. How do their range and precision compare?",
        Choice(options, 0),
        f"BF16 is 1 + {bf16.exponent_bits} + {bf16.mantissa_bits}: FP32's exponent, so FP32's range (largest "
        f"{bf16.max_finite:.3g}, smallest normal {bf16.smallest_normal:.2g}), and {bf16.mantissa_bits} fraction bits. "
        f"FP16 is 1 + {fp16.exponent_bits} + {fp16.mantissa_bits}: {2 ** (fp16.mantissa_bits - bf16.mantissa_bits)} "
        f"times finer steps, but it overflows past {fp16.max_finite:g} and its normals stop at "
        f"{fp16.smallest_normal:.2g}, which is why FP16 training needs loss scaling and BF16 does not.")


@card(topic="number formats", difficulty="hard", frequency="low", page=PAGE)
def tf32_tie_rounds_away():
    f = fb.FORMATS["tf32"]
    x = 1 + 2 ** -(f.mantissa_bits + 1)  # halfway between 1 and the next TF32 value
    away = fb.decode(fb.encode(np.float32(x), f, "nearest_away"), f)
    even = fb.decode(fb.encode(np.float32(x), f, "nearest_even"), f)
    return Ask(
        f"A Tensor Core kernel converts the FP32 value 1 + 2^-{f.mantissa_bits + 1} to TF32 with PTX's "
        "cvt.rna.tf32.f32. What value does it get? (As a decimal.)",
        Number(float(away), rel=1e-7),
        f"TF32 keeps {f.mantissa_bits} fraction bits, so near 1 its values are 2^-{f.mantissa_bits} apart and "
        f"1 + 2^-{f.mantissa_bits + 1} is a tie. The .rna modifier rounds to nearest, ties away from zero (PTX ISA, "
        f"cvt): {float(away):.11g}. Round to nearest even would give {float(even):g}. As bits: add 0x1000 to the "
        "FP32 pattern and clear the low 13 bits.")


@card(topic="number formats", difficulty="medium", frequency="high", page=PEAKS)
def h100_fp32_core_peak():
    name = "NVIDIA H100 SXM5 80GB"
    formula = peak_formula(name, "fp32")
    return Ask(
        f"An H100 SXM5 has {formula.units} SMs with {formula.parts} FP32 cores each, each core doing one fused "
        f"multiply-add per clock, at {formula.ghz:g} GHz. What is its FP32 peak without Tensor Cores, in TFLOP/s?",
        Number(formula.flops / TERA, rel=0.02, unit="TFLOP/s"),
        f"{formula.explain()}: an FMA counts as two FLOPs. The datasheet prints "
        f"{CHIPS[name].peak('fp32') / TERA:g} TFLOP/s. A kernel of plain adds peaks at half of it; the Tensor Cores "
        f"do {CHIPS[name].peak('bf16') / CHIPS[name].peak('fp32'):.0f} times as much in BF16 (dense; the datasheet's "
        "'with sparsity' figures are twice that and need 2:4-sparse weights).")
