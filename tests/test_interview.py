"""The references of chapter 9's drills (aisys.interview), pinned to torch and to hand-worked cases."""

import numpy as np
import pytest
import torch

from aisys.interview import attention, decoding, quantization


@pytest.mark.parametrize("t, s, causal", [(3, 3, False), (3, 3, True), (2, 5, True), (1, 4, True), (4, 2, False)])
def test_grouped_attention_is_sdpa_with_an_end_aligned_mask(t, s, causal):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 6, t, 4)).astype(np.float32)
    k, v = rng.standard_normal((2, 2, 2, s, 4)).astype(np.float32)
    mask = torch.ones(t, s, dtype=torch.bool).tril(s - t) if causal else None  # query i sees j <= i + s - t
    expected = torch.nn.functional.scaled_dot_product_attention(
        *map(torch.from_numpy, (q, k, v)), attn_mask=mask, enable_gqa=True).numpy()
    got = attention.grouped_attention(q, k, v, causal)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_grouped_attention_checks_its_arguments():
    x = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="q must be"):
        attention.grouped_attention(x[0], x, x)
    with pytest.raises(ValueError, match="multiple"):
        attention.grouped_attention(np.zeros((1, 3, 3, 4), np.float32), x, x)
    with pytest.raises(ValueError, match="batch"):
        attention.grouped_attention(x, np.zeros((2, 2, 3, 4), np.float32), x)


def test_decode_step_appends_then_attends_over_every_position():
    rng = np.random.default_rng(1)
    k_cache, v_cache = rng.standard_normal((2, 3, 5, 4))
    q, k, v = rng.standard_normal((3, 3, 4))
    out, k_all, v_all = attention.decode_step(k_cache, v_cache, q, k, v)
    np.testing.assert_array_equal(k_all[:, :5], k_cache)
    np.testing.assert_array_equal(v_all[:, 5], v)
    weights = torch.softmax(torch.einsum("hd,htd->ht", *map(torch.from_numpy, (q, k_all))) / 2, dim=-1)
    np.testing.assert_allclose(out, torch.einsum("ht,htd->hd", weights, torch.from_numpy(v_all)).numpy())
    out, k_all, _ = attention.decode_step(k_cache[:, :0], v_cache[:, :0], q, k, v)  # an empty cache: its own value
    assert k_all.shape == (3, 1, 4)
    np.testing.assert_allclose(out, v)
    with pytest.raises(ValueError, match="shape"):
        attention.decode_step(k_cache, v_cache, q[:, :2], k, v)


def test_top_k_matches_torch_and_breaks_ties_by_the_lower_index():
    x = np.random.default_rng(2).standard_normal((3, 4, 9))
    values, indices = decoding.top_k(x, 4)
    expected = torch.topk(torch.from_numpy(x), 4)
    np.testing.assert_array_equal(values, expected.values.numpy())
    np.testing.assert_array_equal(indices, expected.indices.numpy())
    assert indices.dtype == np.int64
    values, indices = decoding.top_k(np.array([1.0, 5.0, 3.0, 5.0, 3.0, -0.0, 0.0]), 6)
    np.testing.assert_array_equal(indices, [1, 3, 2, 4, 0, 5])
    assert [a.shape for a in decoding.top_k(x, 0)] == [(3, 4, 0)] * 2
    np.testing.assert_array_equal(decoding.top_k(x[0, 0], 20)[1], np.argsort(-x[0, 0]))
    with pytest.raises(ValueError, match="k must"):
        decoding.top_k(x, -1)


def _exhaustive(log_probs0, log_probs, max_len, eos):
    """Every sequence that ends at eos or at max_len tokens, scored: what a beam wider than them all finds."""
    best, frontier = [], [((t,), log_probs0[t]) for t in range(len(log_probs0))]
    while frontier:
        best += [h for h in frontier if h[0][-1] == eos or len(h[0]) == max_len]
        frontier = [(s + (t,), score + log_probs[s[-1], t]) for s, score in frontier
                    if s[-1] != eos and len(s) < max_len for t in range(len(log_probs0))]
    return min(best, key=lambda h: (-h[1], h[0]))


@pytest.mark.parametrize("seed", range(5))
def test_beam_search_with_a_wide_beam_is_exhaustive_and_with_one_greedy(seed):
    rng = np.random.default_rng(seed)
    log_probs0, log_probs = np.log(rng.dirichlet(np.ones(4))), np.log(rng.dirichlet(np.ones(4), size=4))
    tokens, score = decoding.beam_search(log_probs0, log_probs, 4**4, 4, 3)
    assert (tuple(tokens), score) == _exhaustive(log_probs0, log_probs, 4, 3)
    greedy = [int(np.argmax(log_probs0))]
    while greedy[-1] != 3 and len(greedy) < 4:
        greedy.append(int(np.argmax(log_probs[greedy[-1]])))
    assert decoding.beam_search(log_probs0, log_probs, 1, 4, 3)[0].tolist() == greedy


def test_beam_search_sets_finished_hypotheses_aside_and_breaks_ties_by_the_tokens():
    # (2,) finishes at step 1 with -1; (0, 2) finishes at step 2 with -1 too, and is the smaller tuple
    tokens, score = decoding.beam_search(np.array([-1.0, -2, -1]), np.array([[-5.0, -5, 0], [-1] * 3, [-1] * 3]), 2,
                                         2, 2)
    assert (tokens.tolist(), score, tokens.dtype) == ([0, 2], -1.0, np.int64)
    with pytest.raises(ValueError, match="eos"):
        decoding.beam_search(np.zeros(3), np.zeros((3, 3)), 2, 2, 3)


def test_top_p_keeps_the_crossing_token_and_renormalises():
    quarters = np.zeros(4)  # probabilities exactly 1/4: cumulative sums 1/4, 1/2, 3/4, 1
    assert decoding.top_p(quarters, 1.0, 0.5, 0.6) == 1  # tokens 0 and 1 kept, renormalised to 1/2 each
    assert decoding.top_p(quarters, 1.0, 0.5, 0.3) == 0
    assert decoding.top_p(quarters, 1.0, 0.26, 0.99) == 1  # 1/4 < 0.26: the second token crosses p
    assert decoding.top_p([1.0, 3.0, 3.0, 0.0], 1.0, 0.5, 0.3) == 1  # tied probabilities: the lower index first
    assert decoding.top_p([1.0, 4.0, -2.0, 4.0], 0.0, 0.5, 0.9) == 1  # greedy
    assert decoding.top_p([1000.0, 999.0, 1001.0], 1.0, 1e-9, 0.5) == 2
    rng = np.random.default_rng(3)  # p = 1 is plain sampling: u walks the whole sorted distribution
    logits, u = rng.standard_normal(6), rng.uniform()
    probs = torch.softmax(torch.from_numpy(logits / 0.7), 0).numpy()
    order = np.argsort(-probs, kind="stable")
    assert decoding.top_p(logits, 0.7, 1.0, u) == order[np.searchsorted(np.cumsum(probs[order]), u, side="right")]
    for bad, match in (({"p": 0.0}, "p must"), ({"u": 1.0}, "u must"), ({"temperature": -1.0}, "temperature")):
        with pytest.raises(ValueError, match=match):
            decoding.top_p(**{"logits": quarters, "temperature": 1.0, "p": 0.5, "u": 0.5} | bad)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # deprecated, still the yardstick
def test_quantization_matches_torch_per_tensor_and_per_channel():
    x = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32).astype(np.float64)  # float32 values
    scale, zero_point = quantization.choose_params(x, "asymmetric")
    assert (scale.dtype, zero_point.dtype, scale.shape) == (np.float32, np.int32, (1, 1))
    expected = torch.quantize_per_tensor(torch.from_numpy(x).float(), float(scale.item()), int(zero_point.item()),
                                         torch.qint8)
    codes = quantization.quantize(x, scale, zero_point)
    np.testing.assert_array_equal(codes, expected.int_repr().numpy())
    np.testing.assert_array_equal(quantization.dequantize(codes, scale, zero_point), expected.dequantize().numpy())
    scale, zero_point = quantization.choose_params(x, "symmetric", axis=0)
    assert scale.shape == zero_point.shape == (4, 1) and not zero_point.any()
    expected = torch.quantize_per_channel(torch.from_numpy(x).float(), torch.from_numpy(scale.ravel()).double(),
                                          torch.from_numpy(zero_point.ravel()).long(), 0, torch.qint8)
    np.testing.assert_array_equal(quantization.quantize(x, scale, zero_point, symmetric=True),
                                  expected.int_repr().numpy())


def test_quantization_rounds_half_to_even_clamps_and_keeps_zero_in_range():
    np.testing.assert_array_equal(quantization.quantize(np.array([0.25, 0.75, -0.25, -1.25, 1e3, -1e3]), 0.5, 0),
                                  [0, 2, 0, -2, 127, -128])
    assert quantization.quantize(np.array([-1e3]), 0.5, 0, symmetric=True)[0] == -127
    assert quantization.dequantize(np.array([127], np.int8), 0.5, -128)[0] == 127.5  # 255 steps, not int8's -1
    assert [a.item() for a in quantization.choose_params(np.array([-3.0, 507.0]), "asymmetric")] == [2.0, -126]
    positive = quantization.choose_params(np.array([1.0, 2.55]), "asymmetric")  # lo is 0, not 1
    assert [a.item() for a in positive] == [np.float32(0.01), -128]
    assert [a.item() for a in quantization.choose_params(np.zeros(3), "asymmetric")] == [1.0, -128]
    scale, zero_point = quantization.choose_params(np.array([[0.0, 0.0], [-1.0, 2.0]]), "symmetric", axis=-2)
    np.testing.assert_array_equal(scale, np.float32([[1.0], [2 / 127]]))
    with pytest.raises(ValueError, match="axis"):
        quantization.choose_params(np.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match="zero_point"):
        quantization.quantize(np.ones(2), 0.5, 200)
