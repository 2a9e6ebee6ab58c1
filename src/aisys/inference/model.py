"""A tiny Llama-style transformer with random weights: the model every page and exercise of chapter 7 runs.

It has the parts of Llama 2 and 3 (Touvron et al. 2023): RMSNorm before attention and before the
MLP (Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021), grouped-query attention
(Ainslie et al. 2023) and a SwiGLU MLP (Shazeer 2020). The weights are random and seeded, so
nothing is downloaded: its logits mean nothing, but every shape and every dependency of a token
on the tokens before it is real, which is all that caching, paging and batching need.

The forward pass is split into the steps an inference engine schedules (`embed`, per layer `qkv`
then attention then `finish`, and `logits`), so that exercises can put a KV cache, pages or a
batch between them. `forward` is the plain whole-sequence pass they must agree with.
"""

import math
from dataclasses import dataclass

import numpy as np

from .._validate import one_of, positive_int, positive_number
from .attention import attention, softmax


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only transformer (names as in CONTRIBUTING's glossary in the comments)."""

    name: str
    vocab_size: int  # V
    d_model: int  # C
    n_layers: int
    n_heads: int  # nh
    n_kv_heads: int  # nkv: nh for multi-head attention, fewer for grouped-query attention
    d_ff: int  # width of the MLP's hidden layer
    max_seq_len: int  # the context length the model was trained for
    rope_theta: float = 10_000.0

    def __post_init__(self):
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
            positive_int(field, getattr(self, field))
        positive_number("rope_theta", self.rope_theta)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"the head size d_model / n_heads must be even for rotary embeddings, got {self.head_dim}")

    @property
    def head_dim(self) -> int:  # hs
        return self.d_model // self.n_heads

    def parameter_count(self) -> int:
        """Weights, embedding and (untied) output layer included."""
        kv_width = self.n_kv_heads * self.head_dim
        attention_weights = 2 * self.d_model * self.d_model + 2 * self.d_model * kv_width  # wq, wo, wk, wv
        mlp_weights = 3 * self.d_model * self.d_ff  # gate, up, down
        per_layer = attention_weights + mlp_weights + 2 * self.d_model  # two RMSNorm gains
        return self.n_layers * per_layer + 2 * self.vocab_size * self.d_model + self.d_model


TINY = ModelConfig("tiny", vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=176, max_seq_len=1024)

# Published shapes, from each model's config.json on the Hugging Face Hub (meta-llama/...).
LLAMA_2_7B = ModelConfig("Llama-2-7B", 32_000, 4096, 32, 32, 32, 11_008, 4096)
LLAMA_2_13B = ModelConfig("Llama-2-13B", 32_000, 5120, 40, 40, 40, 13_824, 4096)
LLAMA_2_70B = ModelConfig("Llama-2-70B", 32_000, 8192, 80, 64, 8, 28_672, 4096)
LLAMA_3_8B = ModelConfig("Llama-3-8B", 128_256, 4096, 32, 32, 8, 14_336, 8192, rope_theta=500_000.0)
LLAMA_3_70B = ModelConfig("Llama-3-70B", 128_256, 8192, 80, 64, 8, 28_672, 8192, rope_theta=500_000.0)

MODELS = {c.name: c for c in (TINY, LLAMA_2_7B, LLAMA_2_13B, LLAMA_2_70B, LLAMA_3_8B, LLAMA_3_70B)}


@dataclass
class Layer:
    """One transformer block's weights; matrices are (in, out) so that activations multiply from the left."""

    attention_norm: np.ndarray  # (C,)
    wq: np.ndarray  # (C, nh * hs)
    wk: np.ndarray  # (C, nkv * hs)
    wv: np.ndarray  # (C, nkv * hs)
    wo: np.ndarray  # (nh * hs, C)
    mlp_norm: np.ndarray  # (C,)
    w_gate: np.ndarray  # (C, d_ff)
    w_up: np.ndarray  # (C, d_ff)
    w_down: np.ndarray  # (d_ff, C)


class Transformer:
    """A decoder-only transformer with seeded random weights (the default config is `TINY`).

    >>> model = Transformer(seed=0)
    >>> model.forward([1, 2, 3]).shape
    (3, 256)
    """

    def __init__(self, config: ModelConfig = TINY, *, seed: int = 0, dtype: str = "float32"):
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        if config.parameter_count() > 50_000_000:
            raise ValueError(f"config {config.name!r} has {config.parameter_count():,} parameters: "
                             "this numpy model is for small configs (use the shapes of big ones for arithmetic)")
        self.config, self.dtype = config, np.dtype(dtype)
        rng = np.random.default_rng(seed)

        def matrix(rows, cols):  # variance 1/rows keeps activations of order 1 through every layer
            return (rng.standard_normal((rows, cols)) / math.sqrt(rows)).astype(self.dtype)

        c, kv, ff = config.d_model, config.n_kv_heads * config.head_dim, config.d_ff
        ones = np.ones(c, dtype=self.dtype)
        self.embedding = rng.standard_normal((config.vocab_size, c)).astype(self.dtype)  # (V, C)
        self.layers = [
            Layer(ones.copy(), matrix(c, c), matrix(c, kv), matrix(c, kv), matrix(c, c),
                  ones.copy(), matrix(c, ff), matrix(c, ff), matrix(ff, c))
            for _ in range(config.n_layers)
        ]
        self.final_norm = ones.copy()
        self.lm_head = matrix(c, config.vocab_size)  # (C, V)

    def embed(self, tokens):
        """(T, C) embeddings of token ids."""
        return self.embedding[self.check_tokens(tokens)]

    def qkv(self, layer: int, x, positions):
        """Queries (T, nh, hs), keys and values (T, nkv, hs) of layer `layer` for activations x (T, C).

        `positions` are the tokens' places in their sequence: rotary embeddings rotate q and k by
        them, so a cached key stays valid when later tokens arrive.
        """
        w, cfg = self.layers[self.check_layer(layer)], self.config
        x = np.asarray(x, dtype=self.dtype)
        positions = np.asarray(positions)
        if positions.shape != (x.shape[0],):
            raise ValueError(f"positions must hold one position per token ({x.shape[0]}), got shape {positions.shape}")
        h = rms_norm(x, w.attention_norm)
        q = (h @ w.wq).reshape(-1, cfg.n_heads, cfg.head_dim)
        k = (h @ w.wk).reshape(-1, cfg.n_kv_heads, cfg.head_dim)
        v = (h @ w.wv).reshape(-1, cfg.n_kv_heads, cfg.head_dim)
        return rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta), v

    def finish(self, layer: int, x, attended):
        """The rest of layer `layer` after attention: output projection, residual, MLP, residual. (T, C)."""
        w = self.layers[self.check_layer(layer)]
        x = np.asarray(x, dtype=self.dtype)
        x = x + np.asarray(attended, dtype=self.dtype).reshape(x.shape[0], -1) @ w.wo
        h = rms_norm(x, w.mlp_norm)
        gate = h @ w.w_gate
        return x + (gate / (1 + np.exp(-gate)) * (h @ w.w_up)) @ w.w_down  # SwiGLU: silu(gate) * up

    def logits(self, x):
        """(T, V) next-token logits from the last layer's activations (T, C)."""
        return rms_norm(np.asarray(x, dtype=self.dtype), self.final_norm) @ self.lm_head

    def forward(self, tokens):
        """(T, V) logits of every position, recomputing the whole sequence: no cache."""
        x = self.embed(tokens)
        positions = np.arange(x.shape[0])
        for layer in range(self.config.n_layers):
            q, k, v = self.qkv(layer, x, positions)
            x = self.finish(layer, x, attention(q, k, v, causal=True))
        return self.logits(x)

    def check_tokens(self, tokens):
        """tokens as a 1-D int64 array, or a ValueError naming what is wrong."""
        ids = np.asarray(tokens)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"tokens must be a non-empty 1-D sequence of integer ids, got {_describe(tokens)}")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise ValueError(f"tokens must be ids in [0, {self.config.vocab_size}), got values from {ids.min()} to "
                             f"{ids.max()}")
        if ids.size > self.config.max_seq_len:
            raise ValueError(f"tokens holds {ids.size} ids, more than max_seq_len={self.config.max_seq_len}")
        return ids.astype(np.int64)

    def check_layer(self, layer) -> int:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.config.n_layers:
            raise ValueError(f"layer must be an integer in [0, {self.config.n_layers}), got {layer!r}")
        return int(layer)


def token_probabilities(logits, temperature: float):
    """Next-token distributions (..., V) from logits (..., V) at `temperature`, in float64.

    Temperature 0 is greedy decoding: all the probability on the most likely token. Above 0,
    softmax(logits / temperature): below 1 sharper than the model's own distribution, above 1 flatter.
    """
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return np.eye(logits.shape[-1])[logits.argmax(axis=-1)]
    return softmax(logits / temperature, axis=-1)


def rms_norm(x, gain, eps: float = 1e-5):
    """x / rms(x) * gain over the last axis (Zhang & Sennrich 2019): LayerNorm without the mean."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def rope(x, positions, theta: float = 10_000.0, *, style: str = "interleaved"):
    """Rotary position embedding (Su et al. 2021) of x (T, heads, hs) at `positions` (T,).

    Pair i of features rotates by the angle position * theta^(-2i/hs), i = 0 .. hs/2 - 1: the dot
    product of a rotated query and key depends only on the distance between their positions.
    `style` says which features pair: "interleaved" (x[2i], x[2i+1]), as in the paper and GPT-J,
    or "half" (x[i], x[i + hs/2]), as in GPT-NeoX and Hugging Face's Llama (its rotate_half).
    """
    one_of("style", style, ("interleaved", "half"))
    x, positions = np.asarray(x), np.asarray(positions)
    if x.ndim != 3 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape (tokens, heads, head size) with an even head size, got {x.shape}")
    if positions.shape != (x.shape[0],):
        raise ValueError(f"positions must hold one position per token ({x.shape[0]}), got shape {positions.shape}")
    head_size = x.shape[-1]
    pairs = np.arange(head_size // 2)
    first, second = (2 * pairs, 2 * pairs + 1) if style == "interleaved" else (pairs, pairs + head_size // 2)
    frequencies = theta ** (-2 * pairs / head_size)  # (hs/2,)
    angles = positions.astype(np.float64)[:, None] * frequencies  # (T, hs/2)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    a, b = x[..., first], x[..., second]
    out = np.empty_like(x)
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out


def _describe(value) -> str:
    array = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if array is None or array.dtype == object:
        return f"{type(value).__name__} {value!r:.60}"
    return f"{array.dtype} array of shape {array.shape}"
