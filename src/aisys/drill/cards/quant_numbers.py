"""Quantization's numbers: scales and zero points from a range, the symmetric code range, what FP8 saturation
gives, bytes and overhead bits of group-wise int4, KL calibration and delayed scaling (aisys.quant)."""

import numpy as np

from aisys import prose
from aisys.dtypes import BITS
from aisys.quant import affine

from ..card import Ask, Choice, Number, card

PAGE = "08-quantization/numbers"


def _range(low: int, high: int) -> np.ndarray:
    return np.array([low, high]).astype(np.float64)


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def asymmetric_scale_from_a_range():
    low, high = -3, 9
    scale = affine.choose_qparams(_range(low, high), bits=8, symmetric=False)[0].item()
    qmin, qmax = affine.int_range(8, symmetric=False)
    return Ask(
        f"Activations range over [{low}, {high}]. What is the scale of asymmetric int8 quantization (codes {qmin}.."
        f"{qmax}, x = (q - zero_point) * scale)?",
        Number(scale, rel=0.01),
        f"The range [{low}, {high}] already holds 0, and its {high - low} units are spread over all "
        f"{qmax - qmin} steps between {qmin} and {qmax}: scale = {high - low} / {qmax - qmin} = "
        f"{prose.significant(scale, 4)}. Symmetric quantization would need max|x| / {qmax} = "
        f"{prose.significant(max(abs(low), high) / qmax, 4)}, a step {prose.times(max(abs(low), high) / qmax / scale)} "
        "as coarse, with the codes for -9 to -3 never used.")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def asymmetric_zero_point():
    low, high = -3, 9
    scale, zero_point = affine.choose_qparams(_range(low, high), bits=8, symmetric=False)
    qmin, _ = affine.int_range(8, symmetric=False)
    exact = low / scale.item()
    return Ask(
        f"Activations range over [{low}, {high}], quantized asymmetrically to int8 (codes -128..127, scale = range / "
        "255). What is the zero point, the code of 0.0?",
        Number(int(zero_point.item()), rel=0, abs=0.5),
        f"The lowest value, {low}, takes the lowest code, {qmin}: zero_point = {qmin} - round({low} / scale) = "
        f"{qmin} - round({prose.significant(exact, 4)}) = {int(zero_point.item())}. It is rounded to an integer so "
        "that 0.0 (padding, a ReLU's zeros) has an exact code; the range the codes cover then shifts by less than "
        "half a step.")


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def symmetric_int4_range():
    qmin, qmax = affine.int_range(4, symmetric=True)
    full = affine.int_range(4, symmetric=False)
    options = (f"{full[0]}..{full[1]}", f"{qmin}..{qmax}", f"0..{2 ** BITS['int4'] - 1}", f"{full[0]}..{-full[0]}")
    return Ask(
        "Symmetric int4 quantization (zero point 0, scale = max|w| / qmax) uses which codes?",
        Choice(options, 1),
        f"A 4-bit signed code holds {full[0]}..{full[1]}, but symmetric quantization drops {full[0]} so that the range "
        f"mirrors around 0: {qmin}..{qmax}, qmax = 2**(4-1) - 1 = {qmax}. Keeping {full[0]} gives one negative value "
        "no positive twin, and a kernel that negates codes would overflow.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def fp8_saturation():
    from aisys.quant import fp8
    value, past = 500, 61440
    saturated = float(fp8.decode(fp8.encode(np.array([value]).astype(np.float32), "e4m3"), "e4m3")[0])
    return Ask(
        f"A tensor holds {value} after scaling; Transformer Engine casts it to FP8 E4M3 (float8_e4m3fn). What value "
        "does it store?",
        Number(saturated, rel=0.001),
        f"E4M3 has no infinity and its largest value is {prose.significant(fp8.MAX['e4m3'], 5)}: values beyond it "
        f"are saturated (clipped to ±{prose.significant(fp8.MAX['e4m3'], 5)}) before the cast, so that no value "
        "becomes NaN or inf whatever the cast does with it. (torch 2.13's CPU cast to float8_e4m3fn saturates by "
        f"itself; its cast to float8_e5m2, which has infinities, turns {past} into inf, although "
        f"{prose.significant(fp8.MAX['e5m2'], 5)} is E5M2's largest value.)")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def group_int4_bytes_saved():
    group, scale_bits = 128, BITS["fp16"]
    bits_per_weight = BITS["int4"] + scale_bits / group
    ratio = BITS["bf16"] / bits_per_weight
    return Ask(
        f"A BF16 weight is quantized to int4, symmetric, with one FP16 scale per group of {group} weights. How many "
        "times fewer bytes does it take?",
        Number(ratio, rel=0.02, unit="x"),
        f"Each weight costs {BITS['int4']} bits plus its share of the group's scale, {scale_bits} / {group} = "
        f"{prose.significant(scale_bits / group)} bits: {prose.significant(bits_per_weight)} bits against "
        f"{BITS['bf16']}, {prose.times(ratio)} fewer bytes (not quite 4x: the scales cost "
        f"{prose.percent(scale_bits / group, BITS['int4'], 1)} on top of the codes).")


@card(topic="quantization", difficulty="easy", frequency="medium", page=PAGE)
def per_group_overhead_bits():
    group, scale_bits = 64, BITS["bf16"]
    overhead = scale_bits / group
    return Ask(
        f"Int4 weights with one BF16 scale per group of {group} (symmetric, no zero point): how many bits of scale "
        "does each weight carry on top of its 4-bit code?",
        Number(overhead, rel=0.01, unit="bits"),
        f"{scale_bits} bits of scale shared by {group} weights: {scale_bits} / {group} = "
        f"{prose.significant(overhead)} bits per weight. An asymmetric group adds its zero point too "
        f"({BITS['int4']} bits / {group} more); groups of 128 halve the overhead for a little more error.")


@card(topic="quantization", difficulty="hard", frequency="medium", page=PAGE)
def kl_calibration_outliers():
    options = ("they are dropped: the threshold clips them anyway",
               "they are added to the last bin of the reference distribution P",
               "they are spread evenly over the quantized bins of Q",
               "they set the largest candidate threshold and nothing else")
    return Ask(
        "TensorRT's entropy (KL) calibration tries thresholds from bin 128 to bin 2048 of a histogram of |x|. For a "
        "candidate threshold, what happens to the counts of the bins beyond it?",
        Choice(options, 1),
        "P is the histogram clipped at the candidate with the outliers folded into its last bin: that is what "
        "clipping does to the values. Q is the same bins merged into 128 quantized levels and expanded back over "
        "the non-empty bins. KL(P || Q), both normalized, then charges a low threshold for the mass it piles onto "
        "the edge and a high one for coarse levels; dropping the outliers makes clipping look free.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def delayed_scaling_spike():
    from aisys.quant import fp8
    window, steps, spike = 4, 12, 3
    xs = np.ones((steps, 8), np.float32)
    xs[spike] *= 100
    _, scales = fp8.delayed_scaling(xs, "e4m3", window=window)
    lowered = int(np.sum(scales[spike + 1:] < scales[spike]))
    return Ask(
        f"Delayed FP8 scaling keeps an amax history of {window} steps (scale = 448 / max of the history, the step's "
        "amax recorded after its cast). One step's activations are 100 times larger than usual. For how many of "
        "the following steps is the scale lowered?",
        Number(lowered, rel=0, abs=0.5, unit="steps"),
        f"The spike's own step is cast with the scale from the quiet steps before it, so it saturates. Its amax then "
        f"enters the history and stays for {window} steps: steps +1 to +{window} use a scale 100 times smaller, "
        f"wasting precision on ordinary values; at step +{window + 1} it has left the window and the scale recovers.")
