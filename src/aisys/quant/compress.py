"""Compression beyond weight quantization: KV-cache quantization, structured pruning and distillation's loss.

KV cache (KIVI, Liu et al. 2024, arXiv 2402.02750): keys are quantized per channel (the statistics of one
channel over tokens: keys have a few channels of large magnitude, section 3), values per token (their errors
then stay within each token's contribution to the attention output). The cache's bytes count the codes plus one
scale and one zero point (fp16 each, as KIVI stores them) per group of `group_size` elements.

Distillation (Hinton, Vinyals & Dean 2015, arXiv 1503.02531, section 2): the student matches the teacher's
distribution softened by a temperature T, softmax(z / T); the loss is T**2 * KL(p_teacher || p_student), the
T**2 keeping the gradient's size independent of T (the gradient with respect to the student's logits is
T * (p_student - p_teacher)).
"""

import numpy as np

from .._validate import one_of, positive_int, positive_number
from ..inference.model import ModelConfig
from . import affine

KV_METADATA_BITS = 32  # an fp16 scale and an fp16 zero point per group, as KIVI stores them


def kv_cache_elements(config: ModelConfig, tokens: int, batch: int = 1) -> int:
    """Elements of the KV cache: 2 (K and V) x layers x kv heads x head size x tokens x sequences."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim
    return per_token * positive_int("tokens", tokens) * positive_int("batch", batch)


def quantized_kv_cache_bytes(config: ModelConfig, tokens: int, batch: int = 1, bits: int = 4,
                             group_size: int = 128, metadata_bits: int = KV_METADATA_BITS) -> float:
    """Bytes of a KV cache held at `bits` per element plus `metadata_bits` per group of `group_size` elements."""
    elements = kv_cache_elements(config, tokens, batch)
    positive_int("bits", bits)
    return elements * bits / 8 + elements / positive_int("group_size", group_size) * metadata_bits / 8


def quantize_kv(x, bits: int, axis: str) -> np.ndarray:
    """x (tokens, channels) fake-quantized asymmetrically at `bits`, one (scale, zero point) per channel (over the
    tokens: KIVI's keys) or per token (over the channels: KIVI's values), with aisys.quant.affine."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"x must be a (tokens, channels) array, got shape {x.shape}")
    one_of("axis", axis, ("channel", "token"))
    if axis == "token":
        return affine.fake_quantize(x, bits=bits, symmetric=False, granularity="token")
    return affine.fake_quantize(x.T, bits=bits, symmetric=False, granularity="channel").T


def prune_channels(W, keep: int) -> np.ndarray:
    """Structured pruning: the `keep` output channels (rows of W (out, in)) of largest L2 norm, in their order.

    The result is a smaller dense matrix: the next layer drops the matching input columns, and any dense kernel
    runs it faster, unlike unstructured zeros."""
    W = np.asarray(W)
    keep = positive_int("keep", keep)
    if W.ndim != 2 or keep > W.shape[0]:
        raise ValueError(f"W must be (out, in) with at least keep={keep} rows, got shape {W.shape}")
    rows = np.sort(np.argsort(-np.linalg.norm(W, axis=1), kind="stable")[:keep])
    return W[rows]


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """softmax(logits / temperature) over the last axis, in float64."""
    z = np.asarray(logits, dtype=np.float64) / positive_number("temperature", temperature)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def distillation_loss(student_logits, teacher_logits, temperature: float) -> float:
    """T**2 x KL(softmax(teacher / T) || softmax(student / T)), averaged over the rows (Hinton et al. 2015)."""
    p_t = softmax(teacher_logits, temperature)
    log_p_s = np.log(softmax(student_logits, temperature))
    kl = (p_t * (np.log(np.where(p_t > 0, p_t, 1.0)) - log_p_s)).sum(axis=-1)
    return float(temperature ** 2 * kl.mean())


def distillation_gradient(student_logits, teacher_logits, temperature: float) -> np.ndarray:
    """d distillation_loss / d student_logits for one row: T x (p_student - p_teacher), both at temperature T."""
    return temperature * (softmax(student_logits, temperature) - softmax(teacher_logits, temperature))
