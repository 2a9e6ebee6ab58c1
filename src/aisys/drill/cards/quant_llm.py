"""Quantizing LLMs around their outliers: SmoothQuant's migration and where its scale goes, AWQ's scale search and why
it needs no gradient, and why LLM.int8()'s mixed precision and per-channel activation scales are slow
(aisys.quant.smoothquant, aisys.quant.awq)."""

import numpy as np

from aisys.quant import awq, smoothquant

from ..card import Ask, Choice, Number, card

PAGE = "08-quantization/smoothquant-awq"


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def smoothquant_alpha_half():
    act_max, weight_max, alpha = 64, 1 / 4, 1 / 2
    weight = np.array([[weight_max], [-weight_max / 2]])  # two output rows, one input channel j
    s = smoothquant.smoothing_scales(np.array([act_max]), [weight], alpha)[0]
    return Ask(
        f"An activation channel j has max |X_j| = {act_max} over the calibration data; the largest weight in column j "
        f"of the layer reading it is {weight_max}. After SmoothQuant with alpha = {alpha}, what is max |X_j / s_j|?",
        Number(act_max / s, rel=0.02),
        f"s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) = sqrt({act_max}) / sqrt({weight_max}) = {s:g}. The activation's "
        f"max becomes {act_max} / {s:g} = {act_max / s:g} and the weight column's {weight_max} x {s:g} = "
        f"{weight_max * s:g}: at alpha = {alpha} both end at sqrt(max|X_j| max|W_j|), the range split evenly between "
        "the two int8 operands. alpha = 1 would give the activation max 1 and the weights everything; alpha = 0 the "
        "opposite.")


@card(topic="quantization", difficulty="easy", frequency="high", page=PAGE)
def smoothquant_where_the_scale_goes():
    options = ("into the RMSNorm's gain before q, k and v (gain / s), and into the columns of W_q, W_k, W_v (W * s)",
               "into a new elementwise kernel that divides X by s before every GEMM",
               "into the rows (output channels) of W_q, W_k and W_v",
               "into the per-token int8 scales of the activations, at run time")
    return Ask(
        "SmoothQuant divides an activation X by a per-channel s and multiplies the next weights by s. In a Llama "
        "block's attention, where do these go so that inference runs nothing extra?",
        Choice(options, 0),
        "X leaves the RMSNorm as normalised * gain, so dividing the gain by s once, offline, divides X by s for free "
        "(LayerNorm: its bias too). The matching s multiplies column j of each weight that reads X: (X / s)(W s)^T = "
        "X W^T. The rows of W are output channels, the wrong axis; a kernel of its own would cost a pass over X; and a "
        "per-channel factor cannot hide in per-token scales (one number per row of X).")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def per_channel_activation_scales():
    options = ("its scale sits inside the sum over input channels, so it cannot be applied once after the int32 "
               "accumulation",
               "int8 tensor cores accept no scale at all",
               "it needs more memory for the scales than the activations take",
               "it makes the outliers larger")
    return Ask(
        "Why does W8A8 quantize activations per token (one scale per row of X) and not per input channel, which "
        "would isolate the outlier channels?",
        Choice(options, 0),
        "Y_ik = sum_j x_ij w_kj ~ d_i e_k sum_j q_ij r_kj: a scale per token (d_i) and per output channel (e_k) "
        "factor out of the sum, which the tensor cores run in integers. A scale d_j per input channel multiplies each "
        "term differently, so every product would need rescaling before it is added: no integer GEMM. SmoothQuant's "
        "answer is to flatten the channels first, with a scale folded into the weights.")


@card(topic="quantization", difficulty="medium", frequency="medium", page=PAGE)
def llm_int8_is_slow():
    options = ("the outlier columns go through a separate FP16 GEMM: gathering them, two GEMMs and a sum per layer "
               "cost more than int8 saves on small models",
               "int8 GEMMs are slower than FP16 GEMMs on GPUs",
               "it dequantizes every weight to FP32",
               "it recomputes the outlier channels in the backward pass")
    return Ask(
        "LLM.int8() keeps accuracy on large models by running the activation's outlier channels in FP16 and the rest "
        "in int8. Why is it slower than plain FP16 for smaller models?",
        Choice(options, 0),
        "Mixed-precision decomposition finds the outlier columns of X at run time, gathers them and the matching rows "
        "of W^T, runs an FP16 GEMM on them and an int8 GEMM on the rest, and adds the results: extra passes over "
        "memory and two kernels where one would do. The paper reports it slower than FP16 below a few billion "
        "parameters. SmoothQuant and AWQ keep one regular GEMM by folding a per-channel scale into the weights "
        "instead.")


@card(topic="quantization", difficulty="medium", frequency="high", page=PAGE)
def awq_needs_no_backprop():
    options = ("its only free parameter per layer is one exponent r, searched on a grid of about 20 values by forward "
               "passes that compare the layer's outputs",
               "it quantizes the weights before training",
               "it uses the gradients stored by the optimiser",
               "it fits each weight by least squares, in closed form")
    return Ask(
        "AWQ quantizes a 70B model's weights to 4 bits with a small calibration set and no backpropagation. Why is "
        "none needed?",
        Choice(options, 0),
        f"The scales are s = mean|x|^r, one exponent r per layer (or group of layers reading one input), tried at "
        f"r = 0, 1/{awq.N_GRID}, ..., 1 - 1/{awq.N_GRID}: each try is one quantization and one forward pass, and the "
        "least output error wins. With so few degrees of freedom nothing is fitted to the calibration data, which "
        "also keeps AWQ from overfitting it. GPTQ, by contrast, updates the remaining weights with second-order "
        "information (least squares), still without gradients.")


@card(topic="quantization", difficulty="hard", frequency="low", page=PAGE)
def awq_normalised_scale():
    x_mean, ratio = np.array([16, 1, 1]), 1 / 2
    s = awq.grid_scales(x_mean.astype(np.float64), ratio)
    return Ask(
        f"AWQ's calibration gives mean |x| = {x_mean.tolist()} for a layer's three input channels. At ratio "
        f"r = {ratio}, with llm-awq's normalisation s / sqrt(max(s) min(s)), what is the scale of the first channel?",
        Number(s[0], rel=0.02),
        f"s = mean|x|^r = {np.sqrt(x_mean).tolist()}; sqrt(max x min) = sqrt({np.sqrt(x_mean).max():g} x "
        f"{np.sqrt(x_mean).min():g}) = {np.sqrt(np.sqrt(x_mean).max() * np.sqrt(x_mean).min()):g}, so s = "
        f"{s.round(3).tolist()}. The salient channel is scaled up, the others down, around 1; a common factor would "
        "not change the quantized layer (a group's step scales with it) but keeps the weights in FP16's range.")
