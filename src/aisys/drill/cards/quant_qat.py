"""QAT and compression: the straight-through estimator at the clamp, LSQ's step-size gradient, what 2:4 sparsity
can buy a memory-bound product, distillation's temperature, and a quantized KV cache's bytes (aisys.quant)."""

from fractions import Fraction

import numpy as np

from aisys import prose, sparsity
from aisys.dtypes import bytes_per_element
from aisys.inference.kv_cache import kv_cache_bytes
from aisys.inference.model import LLAMA_3_8B
from aisys.quant import affine, compress

from ..card import Ask, Choice, Number, card

QAT_PAGE = "08-quantization/qat"
COMPRESSION_PAGE = "08-quantization/compression"
GB = 10**9


@card(topic="quantization", difficulty="medium", frequency="high", page=QAT_PAGE)
def ste_gradient_at_the_clamp():
    from aisys.quant import qat
    bits, scale = 4, Fraction(1, 2)
    qmin, qmax = affine.int_range(bits, symmetric=True)
    x = (qmax + Fraction(1, 2)) * scale  # x / scale = qmax + 1/2: rounds half to even, up to qmax + 1
    grad = float(qat.fake_quantize_backward([float(x)], float(scale), 0, bits, True, [1])[0])
    options = ("0: round(x / s) is past qmax, so the clamp stops the gradient",
               "1: the straight-through estimator passes every gradient",
               "1/2: the gradient of round at a tie",
               "s: the gradient is scaled by the step")
    answer = 0 if grad == 0 else 1
    return Ask(
        f"QAT fake-quantizes a weight to {bits} bits, symmetric (codes {qmin}..{qmax}), scale s = {scale}, rounding "
        f"half to even, with the straight-through estimator as torch.fake_quantize_per_tensor_affine implements it. "
        f"What gradient reaches x = {x} ({float(x)}) when dL/dx_hat = 1?",
        Choice(options, answer),
        f"x / s = {x / scale} rounds half to even to {qmax + 1}, outside [{qmin}, {qmax}]: the clamp changes the code, "
        f"so the output does not move with x and the gradient is {grad:g}. The mask compares the rounded code with the "
        f"range, both ends included: x / s = {qmax} + 2/5 rounds to {qmax} and passes its gradient. Inside the "
        "range the estimator pretends round is the identity (its true derivative, 0, would stop all training).")


@card(topic="quantization", difficulty="hard", frequency="low", page=QAT_PAGE)
def lsq_step_size_gradient():
    from aisys.quant import qat
    bits, step = 4, 1
    v = [Fraction(23, 10), Fraction(-6, 5), Fraction(19, 2)]  # two inside the range, one clamped above
    qp = affine.int_range(bits, symmetric=True)[1]
    grad = qat.lsq_step_gradient([float(a) for a in v], step, bits, [1] * len(v))
    g = qat.lsq_grad_scale(len(v), bits)
    terms = [round(a) - a if -qp < a < qp else (qp if a >= qp else -qp) for a in v]
    return Ask(
        f"LSQ (Esser et al. 2020) quantizes v = {[str(a) for a in v]} to {bits} bits with a learned step size s = "
        f"{step} (Q_N = Q_P = {qp}). With dL/dv_hat = 1 for each, what is dL/ds, including LSQ's gradient scale "
        f"g = 1 / sqrt(N Q_P)?",
        Number(grad, rel=0.02),
        f"Eq. 3: inside the range d v_hat / d s = round(v/s) - v/s, clamped values give Q_P (or -Q_N): terms "
        f"{[str(t) for t in terms]}, sum {sum(terms)}; times g = 1 / sqrt({len(v)} x {qp}) = {g:.4f}: {grad:.4f}. "
        "The clamped value dominates: it pulls the step up so the range reaches it; the rounding errors inside pull "
        "it towards a grid the weights sit on.")


@card(topic="quantization", difficulty="medium", frequency="medium", page="03-tensor-cores/sparsity")
def two_four_gemv_bound():
    m = k = 4096
    size = bytes_per_element("fp16")
    dense = sparsity.dense_bytes(m, k, "fp16") + (k + m) * size
    sparse = sparsity.sparse_gemm(m, 1, k, "fp16").bytes
    kept = sparsity.compressed_bytes(m, k, "fp16") / sparsity.dense_bytes(m, k, "fp16")
    return Ask(
        f"A batch-1 decode multiplies a {m}x{k} fp16 weight by a vector: memory-bound. Pruned to 2:4 and stored "
        "compressed (half the values plus 2-bit indices), what is the best speedup the roofline allows?",
        Number(dense / sparse, rel=0.02, unit="x"),
        f"Time follows bytes here, not FLOPs: {prose.rate(dense, 'B')} dense against {prose.rate(sparse, 'B')} "
        f"compressed (the weight takes {kept:.4f} of "
        f"its dense bytes, indices included), {prose.times(dense / sparse)}: less than the 2x a sparse Tensor Core "
        "gives a compute-bound GEMM, because the indices are read too.")


@card(topic="quantization", difficulty="easy", frequency="medium", page=COMPRESSION_PAGE)
def distillation_temperature():
    teacher, temperature = [4, 2, 0], 2
    p = compress.softmax(np.array(teacher, dtype=np.float64), temperature)
    p1 = compress.softmax(np.array(teacher, dtype=np.float64), 1)
    return Ask(
        f"A teacher's logits are {teacher}. Distilling at temperature T = {temperature} (Hinton et al. 2015), what "
        "probability does the softened teacher give the second class?",
        Number(float(p[1]), rel=0.02),
        f"softmax(z / T) = softmax({[t / temperature for t in teacher]}) = {np.round(p, 4).tolist()}; at T = 1 it "
        f"would be {np.round(p1, 4).tolist()}. A higher T exposes how the teacher ranks the wrong classes; the loss "
        "T^2 KL(p_teacher || p_student) keeps the gradient's size independent of T.")


@card(topic="quantization", difficulty="medium", frequency="high", page=COMPRESSION_PAGE)
def int4_kv_cache_saving():
    config, tokens, batch, group = LLAMA_3_8B, 8192, 16, 128
    bf16 = kv_cache_bytes(config, tokens, batch, "bf16")
    int8 = compress.quantized_kv_cache_bytes(config, tokens, batch, 8, group)
    int4 = compress.quantized_kv_cache_bytes(config, tokens, batch, 4, group)
    return Ask(
        f"Llama-3-8B ({config.n_layers} layers, {config.n_kv_heads} KV heads of {config.head_dim}) serves {batch} "
        f"sequences of {tokens:,} tokens. How many GB does quantizing the KV cache from BF16 to INT4 save, with an "
        f"fp16 scale and an fp16 zero point per group of {group} elements (as KIVI stores them)?",
        Number((bf16 - int4) / GB, rel=0.02, unit="GB"),
        f"Elements: 2 x {config.n_layers} x {config.n_kv_heads} x {config.head_dim} x {tokens:,} x {batch} = "
        f"{compress.kv_cache_elements(config, tokens, batch):,}. BF16: {prose.rate(bf16, 'B')}; INT8 with metadata: "
        f"{prose.rate(int8, 'B')}; INT4: {prose.rate(int4, 'B')}, a saving of {prose.rate(bf16 - int4, 'B')}. "
        f"The metadata adds 32 / {group} bits per element, which is why INT4 is a bit more than a quarter of BF16.")
