"""The KV cache: what it costs in memory, and the incremental decoder that keeps it.

Generating token t+1 needs the keys and values of tokens 0..t at every layer; they do not change
when later tokens arrive (the mask is causal and the rotary embedding depends on a token's own
position only), so an engine computes them once and keeps them: the KV cache. A decode step then
runs one token through the model instead of the whole sequence (Pope et al., "Efficiently Scaling
Transformer Inference", MLSys 2023, section 2).
"""

import math

import numpy as np

from .._validate import nonnegative_int, nonnegative_number, positive_int, positive_number
from ..dtypes import bytes_per_element
from .attention import attention
from .model import ModelConfig, Transformer, token_probabilities


def kv_bytes_per_token(config: ModelConfig, dtype: str = "bf16") -> float:
    """Bytes one token's keys and values take: 2 (K and V) x layers x kv heads x head size x bytes per element."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * bytes_per_element(dtype)


def kv_cache_bytes(config: ModelConfig, tokens: int, batch: int = 1, dtype: str = "bf16") -> float:
    """Bytes of the KV cache for `batch` sequences of `tokens` tokens each."""
    return kv_bytes_per_token(config, dtype) * nonnegative_int("tokens", tokens) * positive_int("batch", batch)


class KVCache:
    """One sequence's keys and values, every layer, in arrays allocated once for `capacity` tokens.

    Decoding appends one token per step. Growing an array by concatenation would copy all of it
    every step, O(T^2) bytes over a generation of T tokens; writing into space reserved up front
    copies each key once. Real engines reserve too: vLLM in fixed-size blocks (its paged cache),
    Hugging Face's StaticCache to the maximum length, which is what this does.
    """

    def __init__(self, config: ModelConfig, dtype: str = "float32", capacity: int | None = None):
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be 'float32' or 'float64' (the model's dtypes), got {dtype!r}")
        capacity = config.max_seq_len if capacity is None else positive_int("capacity", capacity)
        if capacity > config.max_seq_len:
            raise ValueError(f"capacity must be at most the model's max_seq_len={config.max_seq_len}, got {capacity}")
        shape = (config.n_layers, capacity, config.n_kv_heads, config.head_dim)  # (layers, T, nkv, hs)
        self.config, self.capacity = config, capacity
        self.keys, self.values = np.zeros(shape, dtype), np.zeros(shape, dtype)
        self.lengths = np.zeros(config.n_layers, dtype=np.int64)  # tokens held, per layer

    @property
    def length(self) -> int:
        """Tokens whose keys and values every layer holds: the position the next token takes."""
        return int(self.lengths.min())

    def append(self, layer: int, k, v):
        """Store the new tokens' k and v (T, nkv, hs) of `layer`; return all of that layer's keys and values so far.

        The views returned hold the new tokens too: a token attends to itself.
        """
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.config.n_layers:
            raise ValueError(f"layer must be an integer in [0, {self.config.n_layers}), got {layer!r}")
        k, v = np.asarray(k), np.asarray(v)
        expected = (self.config.n_kv_heads, self.config.head_dim)
        for name, x in (("k", k), ("v", v)):
            if x.ndim != 3 or x.shape[1:] != expected:
                raise ValueError(f"{name} must have shape (T, {expected[0]}, {expected[1]}) (tokens, kv heads, "
                                 f"head size), got {x.shape}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must hold the same tokens, got k {k.shape} and v {v.shape}")
        start, end = int(self.lengths[layer]), int(self.lengths[layer]) + k.shape[0]
        if end > self.capacity:
            raise ValueError(f"the cache is full: layer {layer} holds {start} tokens and {k.shape[0]} more would pass "
                             f"its capacity of {self.capacity} (the model's context, max_seq_len)")
        self.keys[layer, start:end], self.values[layer, start:end] = k, v
        self.lengths[layer] = end
        return self.keys[layer, :end], self.values[layer, :end]


def prefill(model: Transformer, cache: KVCache, tokens):
    """Run `tokens` through the model after what `cache` holds, caching their keys and values: logits (T, V).

    On an empty cache this is the prompt's prefill; on a filled one, a chunk of a longer prompt
    (chunked prefill) or, with one token, a decode step. Positions continue from the cache's
    length, so the rotary embedding rotates each key by its place in the whole sequence.
    """
    _check_pair(model, cache)
    x = model.embed(tokens)  # (T, C)
    if cache.length + x.shape[0] > cache.capacity:
        raise ValueError(f"tokens: {x.shape[0]} more after the {cache.length} cached would pass the cache's "
                         f"capacity of {cache.capacity} tokens (the model's max_seq_len)")
    positions = np.arange(cache.length, cache.length + x.shape[0])
    for layer in range(model.config.n_layers):
        q, k, v = model.qkv(layer, x, positions)
        keys, values = cache.append(layer, k, v)
        x = model.finish(layer, x, attention(q, keys, values, causal=True))
    return model.logits(x)


def decode_step(model: Transformer, cache: KVCache, token: int):
    """One decode step: the next-token logits (V,) after `token`, whose keys and values join the cache."""
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
        raise TypeError(f"token must be one integer token id, got {type(token).__name__} {token!r:.40}")
    return prefill(model, cache, [int(token)])[0]


def generate(model: Transformer, prompt, max_new_tokens: int, *, use_cache: bool = True,
             temperature: float = 0.0, seed: int = 0):
    """Extend `prompt` by `max_new_tokens` tokens: (the new tokens as a list, the logits each was drawn from (n, V)).

    temperature 0 picks the most likely token (greedy); above 0, samples from softmax(logits /
    temperature) with a generator seeded by `seed`. With use_cache=False every step recomputes
    the whole sequence with `model.forward`: the same tokens, at a cost that grows with its length.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    sequence = [int(t) for t in model.check_tokens(prompt)]
    count = nonnegative_int("max_new_tokens", max_new_tokens)
    if len(sequence) + count > model.config.max_seq_len:
        raise ValueError(f"max_new_tokens: {len(sequence)} prompt tokens + {count} new ones pass the model's "
                         f"max_seq_len={model.config.max_seq_len}")
    temperature = nonnegative_number("temperature", temperature)
    rng = np.random.default_rng(seed)
    cache = KVCache(model.config, model.dtype.name) if use_cache else None
    new, all_logits = [], []
    logits = prefill(model, cache, sequence)[-1] if use_cache else None
    for _ in range(count):
        if not use_cache:
            logits = model.forward(sequence)[-1]
        token = _choose(logits, temperature, rng)
        new.append(token)
        all_logits.append(logits)
        sequence.append(token)
        if use_cache and len(new) < count:  # the last token's keys are only needed by a step not taken
            logits = decode_step(model, cache, token)
    return new, np.array(all_logits, dtype=model.dtype).reshape(count, model.config.vocab_size)


def _choose(logits, temperature: float, rng) -> int:
    probabilities = token_probabilities(logits, temperature)
    if temperature == 0:
        return int(np.argmax(probabilities))
    return int(rng.choice(probabilities.size, p=probabilities))


def _check_pair(model, cache) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
    if cache.config != model.config or cache.keys.dtype != model.dtype:
        raise ValueError(f"cache was made for {cache.config.name} in {cache.keys.dtype}, "
                         f"the model is {model.config.name} in {model.dtype}")


def max_sequences(config: ModelConfig, memory_bytes: float, weights_bytes: float, context: int,
                  dtype: str = "bf16") -> int:
    """How many sequences of `context` tokens fit their KV caches in memory next to the weights (0 if none)."""
    free = positive_number("memory_bytes", memory_bytes) - nonnegative_number("weights_bytes", weights_bytes)
    per_sequence = kv_cache_bytes(config, positive_int("context", context), 1, dtype)
    return max(0, math.floor(free / per_sequence))


def max_context(config: ModelConfig, memory_bytes: float, weights_bytes: float, batch: int = 1,
                dtype: str = "bf16") -> int:
    """The longest context each of `batch` sequences can have with their KV caches next to the weights (0 if none)."""
    free = positive_number("memory_bytes", memory_bytes) - nonnegative_number("weights_bytes", weights_bytes)
    per_token = kv_cache_bytes(config, 1, positive_int("batch", batch), dtype)
    return max(0, math.floor(free / per_token))
