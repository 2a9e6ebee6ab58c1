# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the KV cache
#
# **You will learn** how much memory a KV cache takes for real models, and so how many
# sequences a GPU can serve at once; and how to decode incrementally: run the prompt through
# the model once (the *prefill*), keep every layer's keys and values, and then run each new
# token alone (a *decode step*), getting exactly the logits that recomputing the whole sequence
# would give.
#
# Why it works: a token's key and value at a layer depend only on that token and the tokens
# before it (attention is causal), and the rotary embedding rotates a key by its own position
# only. So when token $t+1$ arrives, the keys and values of tokens $0 \dots t$ are the same as
# they were; computing them again is pure waste. Without a cache, generating token $t$ costs a
# forward pass over $t$ tokens; with one, a pass over one token that *reads* $t$ cached keys and
# values (Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023).
#
# The model is `aisys.inference.model.Transformer`, a tiny Llama-style decoder with random
# weights (vocabulary 256, width 64, 2 layers, 4 query heads sharing 2 key/value heads, head
# size 16, context 1024). Its forward pass comes in the pieces an engine schedules:
#
# | call | returns |
# |---|---|
# | `net.embed(tokens)` | activations `(T, C)` |
# | `net.qkv(layer, x, positions)` | `q (T, nh, hs)`, `k (T, nkv, hs)`, `v (T, nkv, hs)`, rotated at `positions` |
# | `attention.attention(q, k, v, causal=True)` | `(T, nh, hs)`; fewer queries than keys: they are the *last* ones |
# | `net.finish(layer, x, attended)` | the layer's output `(T, C)` (projection, residual, MLP) |
# | `net.logits(x)` | `(T, V)` next-token logits |
#
# and `net.forward(tokens)` runs them all over a whole sequence: the answer your decoder must
# reproduce. When your work is graded, `aisys.inference.model` and `aisys.inference.attention`
# can be imported; the reference answers cannot.

# %%
import time
from dataclasses import asdict

import numpy as np
from aisys.inference import attention, model
from aisys_grader import checker

check = checker("07-inference/kv_cache", globals())

# Bytes per element of the formats a KV cache is kept in.
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}

print(model.TINY)
print(asdict(model.LLAMA_3_8B))

# %% [markdown]
# ## 1. How big is the cache?
#
# Every layer caches, for every token, one key and one value per **key/value head**, each of
# the head size $hs = C / n_h$. With multi-head attention (Llama-2-7B) there are as many
# key/value heads as query heads; with grouped-query attention (Ainslie et al. 2023; Llama-3-8B,
# Llama-2-70B) groups of query heads share one, and the cache shrinks by that factor;
# multi-query attention (Shazeer 2019) keeps a single one.
#
# $$\text{bytes} = 2 \times \text{layers} \times n_{kv} \times hs \times \text{bytes per element}
#   \times \text{tokens} \times \text{batch}$$
#
# `config` is a model's shape as a dict (`asdict(model.LLAMA_3_8B)`: `n_layers`, `d_model`,
# `n_heads`, `n_kv_heads`, ...); `dtype` is a key of `BYTES`.

# %% tags=["solution"]
def kv_cache_bytes(config: dict, tokens: int, batch: int, dtype: str) -> float:
    """Bytes of the KV cache of `batch` sequences of `tokens` tokens each."""
    ### BEGIN SOLUTION
    head_size = config["d_model"] // config["n_heads"]
    per_token = 2 * config["n_layers"] * config["n_kv_heads"] * head_size * BYTES[dtype]
    return per_token * tokens * batch
    ### END SOLUTION


# %% tags=["check"]
check("kv_cache_bytes")
### BEGIN HIDDEN TESTS
check("kv_cache_bytes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Per token and for a full 4096-token context, in fp16. Llama-2-7B and Llama-3-8B have the same
# width and depth; grouped-query attention makes the second's cache four times smaller.

# %%
for config in (c for c in model.MODELS.values() if c is not model.TINY):
    shape = asdict(config)
    print(f"{config.name:12} {kv_cache_bytes(shape, 1, 1, 'fp16') / 2**10:7.0f} KiB/token"
          f" {kv_cache_bytes(shape, 4096, 1, 'fp16') / 2**30:8.3f} GiB per 4096-token sequence")

# %% [markdown]
# ## 2. How many sequences fit?
#
# A GPU serving a model holds its weights, and in the memory left over, the caches of the
# sequences it is generating. Write `max_sequences`: how many sequences of `context` tokens
# each have room for their whole cache, next to `weights_bytes` of weights in a GPU of
# `memory_bytes`. A sequence whose cache fits only in part does not count; when the weights
# alone do not fit, the answer is 0. (A real engine also keeps room for activations and
# fragmentation; vLLM's `gpu_memory_utilization` defaults to 90%.)

# %% tags=["solution"]
def max_sequences(config: dict, memory_bytes: float, weights_bytes: float, context: int, dtype: str) -> int:
    """Whole sequences of `context` tokens whose KV caches fit in memory next to the weights."""
    ### BEGIN SOLUTION
    free = memory_bytes - weights_bytes
    return max(0, int(free // kv_cache_bytes(config, context, 1, dtype)))
    ### END SOLUTION


# %% tags=["check"]
check("max_sequences")
### BEGIN HIDDEN TESTS
check("max_sequences", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On an H100 (80 GB) with bf16 weights (2 bytes per parameter) and bf16 caches:

# %%
for name in ("Llama-2-7B", "Llama-3-8B", "Llama-2-13B"):
    config = model.MODELS[name]
    weights = config.parameter_count() * 2
    counts = [max_sequences(asdict(config), 80e9, weights, context, "bf16") for context in (1024, 4096, 8192)]
    print(f"{name:12} weights {weights / 1e9:5.1f} GB; sequences of 1k / 4k / 8k tokens: {counts}")

# %% [markdown]
# ## 3. A cache that grows without copying
#
# Decoding adds one token per step. Growing a numpy array by `np.concatenate` copies all of it
# every step: over a generation of $T$ tokens that is $O(T^2)$ bytes copied, the waste real
# engines avoid by reserving memory up front (vLLM in fixed-size blocks, the next exercise;
# Hugging Face's `StaticCache` to the maximum length). Reserve room for the model's whole
# context here: keys and values of shape `(n_layers, max_seq_len, n_kv_heads, head_dim)`, and
# a count of tokens held per layer.
#
# `append(layer, k, v)` writes the new tokens' `k` and `v` (each `(T, nkv, hs)`) after those
# the layer holds, and returns the layer's keys and values **so far, the new ones included**
# (a token attends to itself). `length` is the number of tokens every layer holds: the
# position the next token will take. `config` here is a `model.ModelConfig` (attributes
# `n_layers`, `max_seq_len`, `n_kv_heads`, `head_dim`), `dtype` the model's (`"float32"` or
# `"float64"`).

# %% tags=["solution"]
class KVCache:
    """One sequence's keys and values at every layer, in arrays allocated once for the model's whole context."""

    def __init__(self, config, dtype="float32"):
        ### BEGIN SOLUTION
        shape = (config.n_layers, config.max_seq_len, config.n_kv_heads, config.head_dim)
        self.keys = np.zeros(shape, dtype)
        self.values = np.zeros(shape, dtype)
        self.lengths = [0] * config.n_layers
        ### END SOLUTION

    @property
    def length(self) -> int:
        """Tokens whose keys and values every layer holds."""
        ### BEGIN SOLUTION
        return min(self.lengths)
        ### END SOLUTION

    def append(self, layer, k, v):
        """Store k and v (T, nkv, hs) of `layer` after what it holds; return all its keys and values so far."""
        ### BEGIN SOLUTION
        start, end = self.lengths[layer], self.lengths[layer] + len(k)
        self.keys[layer, start:end] = k
        self.values[layer, start:end] = v
        self.lengths[layer] = end
        return self.keys[layer, :end], self.values[layer, :end]
        ### END SOLUTION


# %% [markdown]
# The grader drives your class through `run_cache` (provided; do not change it): a fresh cache for
# `config` (a dict of `ModelConfig`'s fields), the appends `[layer, k, v]` in turn, and after each
# one what `append` returned, `length`, and whether the arrays returned are views of the memory the
# first append of that layer returned (`np.shares_memory`): a cache that copies itself as it grows
# returns new arrays every time.

# %%
def run_cache(config, dtype, appends):
    """A KVCache for `config` (a dict of ModelConfig fields); after each [layer, k, v] appended, what append
    returned, the cache's length, and whether the arrays are views of the layer's first ones."""
    cache, first, report = KVCache(model.ModelConfig(**config), dtype), {}, []
    for layer, k, v in appends:
        keys, values = cache.append(layer, k, v)
        first.setdefault(layer, (keys, values))
        report.append({"keys": np.array(keys), "values": np.array(values), "length": cache.length,
                       "in_place": bool(np.shares_memory(keys, first[layer][0])
                                        and np.shares_memory(values, first[layer][1]))})
    return report


# %% tags=["check"]
check("kv_cache_append")
### BEGIN HIDDEN TESTS
check("kv_cache_append", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Prefill
#
# `prefill(net, cache, tokens)` runs `tokens` through the model **after what the cache holds**
# and returns their logits `(T, V)`. On an empty cache that is the prompt: positions
# $0 \dots T-1$, causal attention among the prompt's tokens, exactly `net.forward(tokens)`,
# and on the way every layer's keys and values go into the cache. Take the positions from
# `cache.length`, and let each layer attend over what `cache.append` returns: then the same
# function serves a prompt split into chunks too.
#
# Run the whole prompt through each layer at once: one matrix multiplication over all its
# tokens is what makes prefill compute-bound and fast on a GPU (the check counts the tokens
# each `qkv` call gets).

# %% tags=["solution"]
def prefill(net, cache, tokens):
    """Logits (T, V) of `tokens` placed after what `cache` holds; their keys and values join the cache."""
    ### BEGIN SOLUTION
    x = net.embed(tokens)
    positions = np.arange(cache.length, cache.length + len(x))
    for layer in range(net.config.n_layers):
        q, k, v = net.qkv(layer, x, positions)
        keys, values = cache.append(layer, k, v)
        x = net.finish(layer, x, attention.attention(q, keys, values, causal=True))
    return net.logits(x)
    ### END SOLUTION


# %% [markdown]
# The grader runs your decoder through this driver (provided; do not change it). It builds the
# model from a seed, prefills `tokens[:prompt_len]`, then decodes the remaining tokens one by
# one (the given ones, not sampled ones, so that every logit can be compared with
# `net.forward(tokens)`), and it reports what the model saw: the number of tokens each `qkv`
# call carried, and how many times `forward` ran.

# %%
class CountingModel(model.Transformer):
    """The tiny model, counting the tokens of each `qkv` call and the calls to `forward`."""

    def __init__(self, seed=0, dtype="float32"):
        super().__init__(seed=seed, dtype=dtype)
        self.qkv_tokens, self.forward_calls = [], 0

    def qkv(self, layer, x, positions):
        self.qkv_tokens.append(len(positions))
        return super().qkv(layer, x, positions)

    def forward(self, tokens):
        self.forward_calls += 1
        return super().forward(tokens)


def run_decoder(tokens, prompt_len, seed=0, dtype="float32"):
    """Prefill tokens[:prompt_len], decode the rest one at a time: their logits, and what the model saw."""
    net = CountingModel(seed=seed, dtype=dtype)
    cache = KVCache(net.config, dtype)
    prefill_logits = prefill(net, cache, tokens[:prompt_len])
    qkv_tokens = {"prefill": net.qkv_tokens, "decode": []}
    decode_logits = []
    for token in tokens[prompt_len:]:
        net.qkv_tokens = []
        decode_logits.append(decode_step(net, cache, token))
        qkv_tokens["decode"].append(net.qkv_tokens)
    return {"prefill": prefill_logits, "decode": decode_logits, "qkv_tokens": qkv_tokens,
            "forward_calls": net.forward_calls}


# %% tags=["check"]
check("prefill")
### BEGIN HIDDEN TESTS
check("prefill", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Decode
#
# `decode_step(net, cache, token)` runs one token, the one just generated, and returns the
# logits `(V,)` of the token after it. It is a prefill of one token: the new token takes
# position `cache.length`, its key and value join the cache, and its query attends over every
# cached key, its own included. Nothing is recomputed: `qkv` sees one token per layer.

# %% tags=["solution"]
def decode_step(net, cache, token):
    """Logits (V,) of the next token after `token`, whose keys and values join the cache."""
    ### BEGIN SOLUTION
    return prefill(net, cache, [token])[0]
    ### END SOLUTION


# %% tags=["check"]
check("decode_step")
### BEGIN HIDDEN TESTS
check("decode_step", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("uses_the_cache")
### BEGIN HIDDEN TESTS
check("uses_the_cache", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Generate, with and without the cache
#
# Greedy generation picks the most likely token at each step. Below, 200 tokens after a
# 10-token prompt, once with your cache and once recomputing the whole sequence with
# `net.forward` at every step: the same tokens, and the logits agree to rounding. Watch the
# times: without the cache each step's work grows with the sequence, $O(T^2)$ over the
# generation for the projections and MLP and $O(T^3)$ for attention; with it, $O(T)$ and
# $O(T^2)$. (numpy on a CPU shows the shape of the effect, not a GPU's numbers: on a GPU a
# decode step is limited by reading the weights and the cache from memory.)

# %%
def generate(net, prompt, steps, use_cache=True):
    """Greedy decoding: the new tokens and the logits each was chosen from."""
    sequence, chosen = list(prompt), []
    if use_cache:
        cache = KVCache(net.config, net.dtype.name)
        logits = prefill(net, cache, sequence)[-1]
    for step in range(steps):
        if not use_cache:
            logits = net.forward(sequence)[-1]
        chosen.append(logits)
        sequence.append(int(np.argmax(logits)))
        if use_cache and step < steps - 1:
            logits = decode_step(net, cache, sequence[-1])
    return sequence[len(prompt):], np.array(chosen)


net = model.Transformer(seed=0)
prompt = list(range(10))
for use_cache in (True, False):
    start = time.perf_counter()
    tokens, logits = generate(net, prompt, 200, use_cache)
    seconds = time.perf_counter() - start
    print(f"use_cache={use_cache!s:5}: {seconds * 1e3:6.0f} ms, first tokens {tokens[:8]}")
    if use_cache:
        cached_tokens, cached_logits = tokens, logits
print("same tokens:", tokens == cached_tokens, "| largest logit difference:", np.abs(logits - cached_logits).max())
