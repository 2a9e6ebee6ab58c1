"""The chapter-7 foundation: the tiny transformer, reference attention, paged attention's layout and step costs."""

import numpy as np
import pytest

from aisys.hardware import chip
from aisys.inference import attention, cost, kv_cache, model, paged_attention

H100 = chip("NVIDIA H100 SXM5 80GB")


def naive_attention(q, k, v, causal):
    """One head at a time, with explicit loops over queries: nothing shared with the reference but numpy."""
    t_q, n_heads, head_size = q.shape
    group = n_heads // k.shape[1]
    out = np.zeros((t_q, n_heads, head_size))
    for h in range(n_heads):
        for i in range(t_q):
            visible = k.shape[0] - t_q + i + 1 if causal else k.shape[0]
            scores = k[:visible, h // group] @ q[i, h] / np.sqrt(head_size)
            weights = np.exp(scores - scores.max())
            out[i, h] = weights @ v[:visible, h // group] / weights.sum()
    return out


@pytest.mark.parametrize("t_q, t_k, n_heads, n_kv_heads", [(5, 5, 4, 4), (1, 7, 4, 2), (3, 8, 6, 1), (4, 4, 2, 2)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_matches_a_loop_over_heads_and_queries(t_q, t_k, n_heads, n_kv_heads, causal):
    rng = np.random.default_rng(t_q * 100 + t_k)
    q = rng.standard_normal((t_q, n_heads, 8))
    k, v = rng.standard_normal((2, t_k, n_kv_heads, 8))
    np.testing.assert_allclose(attention.attention(q, k, v, causal=causal), naive_attention(q, k, v, causal),
                               atol=1e-12)


def test_attention_survives_large_logits_and_keeps_the_dtype():
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((4, 2, 8)) * 1000).astype(np.float32)
    k, v = rng.standard_normal((2, 4, 2, 8)).astype(np.float32)
    out = attention.attention(q, k, v)
    assert out.dtype == np.float32 and np.isfinite(out).all()


def test_causal_mask_is_bottom_right_aligned():
    assert attention.causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize("shapes, message", [
    (((3, 4, 8), (3, 4, 8), (3, 4, 4)), "same shape"),
    (((3, 4, 8), (3, 3, 8), (3, 3, 8)), "multiple"),
    (((3, 4, 8), (3, 4, 6), (3, 4, 6)), "head size"),
    (((4, 8), (3, 4, 8), (3, 4, 8)), "q must have 3 dimensions"),
    (((3, 4, 8), (0, 4, 8), (0, 4, 8)), "at least one token"),
    (((5, 4, 8), (3, 4, 8), (3, 4, 8)), "at least as many keys"),
])
def test_attention_names_what_does_not_fit(shapes, message):
    q, k, v = (np.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        attention.attention(q, k, v)


def test_decoding_token_by_token_through_the_split_forward_gives_the_whole_forward():
    m = model.Transformer(seed=3, dtype="float64")
    tokens = np.random.default_rng(1).integers(0, m.config.vocab_size, 40)
    keys = [np.zeros((0, 2, 16))] * m.config.n_layers
    values = list(keys)
    logits = []
    for position, token in enumerate(tokens):
        x = m.embed([token])
        for layer in range(m.config.n_layers):
            q, k, v = m.qkv(layer, x, [position])
            keys[layer], values[layer] = np.concatenate([keys[layer], k]), np.concatenate([values[layer], v])
            x = m.finish(layer, x, attention.attention(q, keys[layer], values[layer]))
        logits.append(m.logits(x)[0])
    np.testing.assert_allclose(np.array(logits), m.forward(tokens), atol=1e-10)


def test_a_token_depends_on_the_tokens_before_it_and_on_its_position():
    m = model.Transformer(seed=0)
    base = m.forward([5, 6, 7])
    assert not np.allclose(m.forward([9, 6, 7])[2], base[2])  # an earlier token changes a later logit
    np.testing.assert_allclose(m.forward([5, 6, 7, 8])[:3], base, atol=1e-5)  # a later token does not
    assert not np.allclose(m.forward([7, 7])[1], m.forward([7])[0])  # position matters


def test_the_model_is_seeded_and_its_logits_are_of_order_one():
    tokens = np.arange(50)
    a, b = model.Transformer(seed=1).forward(tokens), model.Transformer(seed=1).forward(tokens)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, model.Transformer(seed=2).forward(tokens))
    assert 0.3 < a.std() < 3


def test_rope_rotations_depend_only_on_the_distance_between_positions():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 1, 16))
    def score(i, j):
        return float(model.rope(q, [i])[0, 0] @ model.rope(k, [j])[0, 0])
    assert score(3, 1) == pytest.approx(score(12, 10))
    assert score(3, 1) != pytest.approx(score(3, 2))


def test_rope_layouts_match_meta_llama_and_hugging_face():
    """Interleaved: Meta's Llama code, pairs as complex numbers times e^(i angle); half: Hugging Face's rotate_half."""
    rng = np.random.default_rng(1)
    x, positions, hs = rng.standard_normal((5, 3, 8)), np.array([0, 7, 2, 2, 4000]), 8
    angles = positions[:, None, None] * 10_000.0 ** (-np.arange(0, hs, 2) / hs)  # (T, 1, hs/2)
    rotated = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)
    np.testing.assert_allclose(model.rope(x, positions), np.stack([rotated.real, rotated.imag], -1).reshape(x.shape))
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    rotate_half = np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], -1)
    np.testing.assert_allclose(model.rope(x, positions, style="half"), x * cos + rotate_half * sin)
    with pytest.raises(ValueError, match="style"):
        model.rope(x, positions, style="neox")
    with pytest.raises(ValueError, match="positions"):
        model.rope(x, positions[:2])


def test_published_parameter_counts():
    # 6.74B, 8.03B and 70.6B are the counts Meta reports for these shapes.
    assert model.LLAMA_2_7B.parameter_count() == pytest.approx(6.738e9, rel=1e-3)
    assert model.LLAMA_3_8B.parameter_count() == pytest.approx(8.030e9, rel=1e-3)
    assert model.LLAMA_3_70B.parameter_count() == pytest.approx(70.55e9, rel=1e-3)
    tiny = model.Transformer()
    counted = tiny.embedding.size + tiny.lm_head.size + tiny.final_norm.size + sum(
        w.size for layer in tiny.layers for w in vars(layer).values())
    assert counted == model.TINY.parameter_count()


@pytest.mark.parametrize("tokens, message", [
    ([], "non-empty"), ([[1, 2]], "1-D"), ([1.5], "integer"), ([256], r"\[0, 256\)"), ([-1], r"\[0, 256\)"),
    ([3] * 1025, "max_seq_len"),
])
def test_bad_tokens_are_named(tokens, message):
    with pytest.raises(ValueError, match=message):
        model.Transformer().forward(tokens)


def test_bad_configs_and_arguments_are_named():
    with pytest.raises(ValueError, match="n_heads .* multiple of n_kv_heads"):
        model.ModelConfig("x", 16, 64, 1, 4, 3, 32, 8)
    with pytest.raises(ValueError, match="d_model"):
        model.ModelConfig("x", 16, 60, 1, 8, 8, 32, 8)
    with pytest.raises(ValueError, match="vocab_size"):
        model.ModelConfig("x", 0, 64, 1, 4, 4, 32, 8)
    with pytest.raises(ValueError, match="numpy model is for small configs"):
        model.Transformer(model.LLAMA_3_8B)
    with pytest.raises(ValueError, match="dtype"):
        model.Transformer(dtype="float16")
    with pytest.raises(ValueError, match="layer"):
        model.Transformer().qkv(2, np.zeros((1, 64)), [0])
    with pytest.raises(ValueError, match="positions"):
        model.Transformer().qkv(0, np.zeros((2, 64)), [0])


def test_kv_bytes_per_token_for_multi_head_and_grouped_query_attention():
    assert kv_cache.kv_bytes_per_token(model.LLAMA_2_7B, "fp16") == 512 * 1024  # 2 x 32 layers x 32 heads x 128 x 2 B
    assert kv_cache.kv_bytes_per_token(model.LLAMA_3_8B, "bf16") == 128 * 1024  # 8 kv heads: 4x less
    assert kv_cache.kv_cache_bytes(model.LLAMA_3_8B, 4096, batch=64, dtype="fp8_e4m3") == 64 * 4096 * 64 * 1024


def test_paged_attention_reads_each_sequence_through_its_block_table():
    rng = np.random.default_rng(0)
    k_cache, v_cache = rng.standard_normal((2, 10, 4, 2, 8))
    q = rng.standard_normal((3, 4, 8))
    tables = np.array([[3, 1, 7], [0, 9, -1], [5, -1, -1]])  # -1: padding past the context
    lengths = np.array([9, 5, 1])
    out = paged_attention.paged_attention(q, k_cache, v_cache, tables, lengths)
    for b, blocks in enumerate(([3, 1, 7], [0, 9], [5])):
        keys = np.concatenate([k_cache[i] for i in blocks])[:lengths[b]]
        values = np.concatenate([v_cache[i] for i in blocks])[:lengths[b]]
        np.testing.assert_allclose(out[b], attention.attention(q[b][None], keys, values)[0], atol=1e-12)


@pytest.mark.parametrize("tables, lengths, message", [
    ([[0, 1]], [9], "needs 3 blocks"), ([[0, 1]], [0], ">= 1"), ([[0, 12]], [5], "outside"),
    ([[0.0, 1.0]], [5], "integers"), ([[0, 1]], [5, 5], r"shape \(1,\)"),
])
def test_paged_attention_names_a_table_that_does_not_fit(tables, lengths, message):
    cache = np.zeros((10, 4, 2, 8))
    with pytest.raises(ValueError, match=message):
        paged_attention.paged_attention(np.zeros((1, 4, 8)), cache, cache, np.array(tables), np.array(lengths))


def test_decode_is_memory_bound_and_prefill_compute_bound_on_an_h100():
    one_decode = cost.step_cost(model.LLAMA_3_8B, [(1, 1000)])
    assert one_decode.intensity < 2  # about one FLOP per byte: each weight is read for one token
    assert cost.step_seconds(model.LLAMA_3_8B, [(1, 1000)], H100) == pytest.approx(one_decode.bytes / 3.35e12)
    prefill = cost.step_cost(model.LLAMA_3_8B, [(2000, 0)])
    assert prefill.intensity > H100.ridge_point("bf16")
    # 64 decodes cost far less than 64 single ones: the weights are read once per step.
    batched = cost.step_seconds(model.LLAMA_3_8B, [(1, 1000)] * 64, H100)
    assert batched < 2 * cost.step_seconds(model.LLAMA_3_8B, [(1, 1000)], H100)


def test_step_cost_counts_attention_pairs():
    config = model.TINY
    none = cost.step_cost(config, [(3, 0)])
    cached = cost.step_cost(config, [(3, 10)])
    per_pair = 4 * config.n_layers * config.n_heads * config.head_dim
    assert cached.flops - none.flops == per_pair * 3 * 10  # each of 3 new tokens sees 10 cached ones


@pytest.mark.parametrize("batch, error, message", [
    ([], ValueError, "at least one"), ([(1,)], ValueError, r"batch\[0\]"), ([(1, -2)], ValueError, "cached"),
    (5, TypeError, "batch must be a list"),
])
def test_step_cost_names_a_bad_batch(batch, error, message):
    with pytest.raises(error, match=message):
        cost.step_cost(model.TINY, batch)
