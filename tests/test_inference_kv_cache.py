"""The KV cache: incremental decoding agrees with recomputation, the size calculator with hand arithmetic."""

import numpy as np
import pytest

from aisys.inference import kv_cache
from aisys.inference.attention import attention
from aisys.inference.kv_cache import KVCache, decode_step, generate, max_context, max_sequences, prefill
from aisys.inference.model import LLAMA_2_7B, LLAMA_2_70B, LLAMA_3_8B, TINY, ModelConfig, Transformer

# Incremental and whole-sequence passes multiply the same numbers, but a (1, C) @ (C, N) product
# and a (T, C) @ (C, N) one go through different BLAS kernels, which sum in different orders: the
# results agree to rounding, not bit for bit. Measured worst cases: 2.4e-6 (float32), 4e-15
# (float64) on logits of size ~4.
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}

SMALL = ModelConfig("small", vocab_size=50, d_model=32, n_layers=3, n_heads=4, n_kv_heads=1, d_ff=48, max_seq_len=24)


def incremental_logits(model, tokens, prompt_len):
    """Logits of every position: the prompt in one prefill, then one decode step per token."""
    cache = KVCache(model.config, model.dtype.name)
    rows = [prefill(model, cache, tokens[:prompt_len])]
    rows += [decode_step(model, cache, int(t))[None] for t in tokens[prompt_len:]]
    return np.concatenate(rows)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("prompt_len", [1, 2, 7, 40])
def test_incremental_decoding_equals_recomputation(dtype, prompt_len):
    model = Transformer(seed=prompt_len, dtype=dtype)
    tokens = np.random.default_rng(prompt_len).integers(0, TINY.vocab_size, size=prompt_len + 9)
    got = incremental_logits(model, tokens, prompt_len)
    np.testing.assert_allclose(got, model.forward(tokens), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    assert got.dtype == np.dtype(dtype)


def test_chunked_prefill_equals_one_prefill():
    model = Transformer(SMALL, seed=3, dtype="float64")
    tokens = np.arange(20) % SMALL.vocab_size
    cache = KVCache(SMALL, "float64")
    chunks = [prefill(model, cache, tokens[a:b]) for a, b in ((0, 5), (5, 6), (6, 20))]
    np.testing.assert_allclose(np.concatenate(chunks), model.forward(tokens), rtol=1e-10, atol=1e-10)
    assert cache.length == 20


def test_cache_holds_the_models_keys_at_their_positions():
    """Each layer's cached keys are what qkv gives for the whole sequence (RoPE at the true positions)."""
    model = Transformer(SMALL, seed=1, dtype="float64")
    tokens = [3, 1, 4, 1, 5, 9]
    cache = KVCache(SMALL, "float64")
    prefill(model, cache, tokens[:2])
    for t in tokens[2:]:
        decode_step(model, cache, t)
    x = model.embed(tokens)
    assert cache.length == len(tokens) and cache.lengths.tolist() == [len(tokens)] * SMALL.n_layers
    for layer in range(SMALL.n_layers):
        q, k, v = model.qkv(layer, x, np.arange(len(tokens)))
        np.testing.assert_allclose(cache.keys[layer, :len(tokens)], k, atol=1e-12)
        np.testing.assert_allclose(cache.values[layer, :len(tokens)], v, atol=1e-12)
        x = model.finish(layer, x, attention(q, k, v))


def test_cache_is_allocated_once():
    cache = KVCache(SMALL)
    keys = cache.keys
    model = Transformer(SMALL)
    prefill(model, cache, [1, 2, 3])
    decode_step(model, cache, 4)
    assert cache.keys is keys and cache.keys.shape == (SMALL.n_layers, SMALL.max_seq_len, 1, SMALL.head_dim)


def test_decoding_up_to_max_seq_len_then_a_clear_error():
    model = Transformer(SMALL)
    cache = KVCache(SMALL)
    prefill(model, cache, [0] * (SMALL.max_seq_len - 1))
    decode_step(model, cache, 1)  # the last position the model has
    assert cache.length == SMALL.max_seq_len
    with pytest.raises(ValueError, match="capacity of 24"):
        decode_step(model, cache, 2)
    with pytest.raises(ValueError, match="capacity"):
        prefill(Transformer(SMALL), KVCache(SMALL, capacity=4), [1] * 5)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_generate_with_and_without_cache_agree(temperature):
    model = Transformer(seed=2, dtype="float64")
    with_cache = generate(model, [5, 6, 7], 12, temperature=temperature, seed=4)
    without = generate(model, [5, 6, 7], 12, use_cache=False, temperature=temperature, seed=4)
    assert with_cache[0] == without[0] and len(with_cache[0]) == 12
    np.testing.assert_allclose(with_cache[1], without[1], atol=1e-10)
    assert with_cache[1].shape == (12, TINY.vocab_size)


def test_generate_greedy_picks_the_argmax_and_zero_tokens_is_empty():
    model = Transformer(seed=0)
    tokens, logits = generate(model, [1], 3)
    assert tokens == [int(np.argmax(row)) for row in logits]
    tokens, logits = generate(model, [1], 0)
    assert tokens == [] and logits.shape == (0, TINY.vocab_size)


def test_bytes_per_token_of_real_models():
    # Llama-2-7B, multi-head: 2 (K, V) x 32 layers x 32 heads x 128 x 2 bytes = 512 KiB per token.
    assert kv_cache.kv_bytes_per_token(LLAMA_2_7B, "fp16") == 2 * 32 * 32 * 128 * 2 == 0.5 * 2**20
    # Llama-3-8B, grouped-query with 8 kv heads: a quarter of that, 128 KiB.
    assert kv_cache.kv_bytes_per_token(LLAMA_3_8B, "bf16") == 128 * 2**10
    assert kv_cache.kv_bytes_per_token(LLAMA_3_8B, "fp8_e4m3") == 64 * 2**10
    # Llama-2-70B: 80 layers x 8 kv heads x 128 x 2 x 2 bytes = 320 KiB; 4096 tokens x 8 sequences = 10 GiB.
    assert kv_cache.kv_cache_bytes(LLAMA_2_70B, 4096, 8, "fp16") == 10 * 2**30


def test_max_sequences_and_context_on_an_h100():
    # Llama-3-8B in bf16 (16.06 GB of weights) on 80 GB: 63.94 GB for caches of 128 KiB per token.
    weights = LLAMA_3_8B.parameter_count() * 2
    free = 80e9 - weights
    assert max_sequences(LLAMA_3_8B, 80e9, weights, 8192) == int(free // (8192 * 2**17)) == 59
    assert max_context(LLAMA_3_8B, 80e9, weights, batch=1) == int(free // 2**17)
    assert max_context(LLAMA_3_8B, 80e9, weights, batch=64) == int(free // (64 * 2**17))
    per_sequence = kv_cache.kv_cache_bytes(LLAMA_3_8B, 100)
    assert max_sequences(LLAMA_3_8B, 3 * per_sequence + 10, 10, 100) == 3  # exactly three fit
    assert max_sequences(LLAMA_3_8B, 3 * per_sequence + 9, 10, 100) == 2  # one byte short of three
    assert max_sequences(LLAMA_3_8B, 1e9, 2e9, 100) == 0  # the weights alone do not fit
    assert max_context(LLAMA_3_8B, 1e9, 1e9) == 0


@pytest.mark.parametrize("call, argument", [
    (lambda: KVCache("tiny"), "config"),
    (lambda: KVCache(TINY, "float16"), "dtype"),
    (lambda: KVCache(TINY, capacity=0), "capacity"),
    (lambda: KVCache(TINY, capacity=2000), "capacity"),
    (lambda: KVCache(TINY).append(2, np.zeros((1, 2, 16)), np.zeros((1, 2, 16))), "layer"),
    (lambda: KVCache(TINY).append(0, np.zeros((1, 4, 16)), np.zeros((1, 4, 16))), "k"),
    (lambda: KVCache(TINY).append(0, np.zeros((1, 2, 16)), np.zeros((2, 2, 16))), "k and v"),
    (lambda: prefill(Transformer(), KVCache(SMALL), [1]), "cache"),
    (lambda: prefill(Transformer(), KVCache(TINY, "float64"), [1]), "cache"),
    (lambda: prefill("model", KVCache(TINY), [1]), "model"),
    (lambda: prefill(Transformer(), [], [1]), "cache"),
    (lambda: prefill(Transformer(), KVCache(TINY), []), "tokens"),
    (lambda: decode_step(Transformer(), KVCache(TINY), [1, 2]), "token"),
    (lambda: decode_step(Transformer(), KVCache(TINY), 256), "tokens"),
    (lambda: generate(Transformer(), [1], -1), "max_new_tokens"),
    (lambda: generate(Transformer(), [1] * 1000, 25), "max_new_tokens"),
    (lambda: generate(Transformer(), [1], 2, temperature=-1), "temperature"),
    (lambda: kv_cache.kv_cache_bytes(TINY, -1), "tokens"),
    (lambda: kv_cache.kv_cache_bytes(TINY, 1, 0), "batch"),
    (lambda: kv_cache.kv_cache_bytes(TINY, 1, 1, "fp12"), "dtype"),
    (lambda: kv_cache.kv_bytes_per_token({"n_layers": 2}), "config"),
    (lambda: max_sequences(TINY, 0, 0, 10), "memory_bytes"),
    (lambda: max_sequences(TINY, 1e9, -1, 10), "weights_bytes"),
    (lambda: max_sequences(TINY, 1e9, 0, 0), "context"),
    (lambda: max_context(TINY, 1e9, 0, 0), "batch"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises((TypeError, ValueError), match=argument):
        call()
