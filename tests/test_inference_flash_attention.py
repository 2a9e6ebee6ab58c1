"""aisys.inference.flash_attention: tiled attention with the online softmax equals softmax attention."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisys.inference import flash_attention as fa
from aisys.inference.attention import attention, causal_mask


def _qkv(rng, t_q, t_k, n_heads, n_kv_heads, head_size, dtype=np.float64):
    return (rng.standard_normal((t_q, n_heads, head_size)).astype(dtype),
            rng.standard_normal((t_k, n_kv_heads, head_size)).astype(dtype),
            rng.standard_normal((t_k, n_kv_heads, head_size)).astype(dtype))


def _lse(q, k, causal):
    """Log-sum-exp of each (query, head) row of the scaled scores, in float64, written plainly."""
    t_q, n_heads, head_size = q.shape
    k = np.repeat(k.astype(np.float64), n_heads // k.shape[1], axis=1)
    scores = np.einsum("qhd,khd->hqk", q.astype(np.float64), k) / np.sqrt(head_size)
    if causal:
        scores = np.where(causal_mask(t_q, k.shape[0]), scores, -np.inf)
    top = scores.max(axis=-1)
    return (top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))).T


SHAPES = [  # t_q, t_k, nh, nkv, hs, block_q, block_k, causal
    (1, 1, 1, 1, 1, 64, 64, True),
    (64, 64, 4, 4, 16, 16, 16, True),
    (100, 100, 4, 2, 16, 16, 32, True),  # blocks not dividing T, GQA
    (100, 100, 4, 2, 16, 16, 32, False),
    (37, 37, 2, 2, 8, 64, 64, True),  # one tile
    (1, 57, 8, 2, 16, 16, 16, True),  # decode: one query sees every key
    (13, 50, 2, 1, 8, 5, 7, True),  # chunked prefill: Tq < Tk, bottom-right
    (33, 20, 2, 2, 4, 8, 8, False),  # Tq > Tk, not causal
    (50, 50, 6, 3, 8, 1, 1, True),  # tiles of one
]


@pytest.mark.parametrize("t_q,t_k,nh,nkv,hs,bq,bk,causal", SHAPES)
def test_equals_softmax_attention(t_q, t_k, nh, nkv, hs, bq, bk, causal):
    q, k, v = _qkv(np.random.default_rng(t_q * 100 + t_k), t_q, t_k, nh, nkv, hs)
    out, lse = fa.flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    np.testing.assert_allclose(out, attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, _lse(q, k, causal), rtol=1e-10, atol=1e-12)
    assert out.dtype == np.float64 and out.shape == q.shape and lse.shape == (t_q, nh)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 30), st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
       st.integers(1, 9), st.integers(1, 9), st.booleans(), st.integers(0, 2**31))
def test_any_shape_and_blocks(t_q, extra_keys, heads, bq, bk, causal, seed):
    q, k, v = _qkv(np.random.default_rng(seed), t_q, t_q + extra_keys, heads[0], heads[1], 4)
    out, _ = fa.flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    np.testing.assert_allclose(out, attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_large_logits_do_not_overflow(causal):
    """Scores past 710: exp overflows float32 (> 88) and float64 (> 709.8) unless the max is subtracted."""
    q, k, v = _qkv(np.random.default_rng(1), 40, 40, 2, 2, 16)
    q = 300 * q
    assert np.abs(np.einsum("qhd,khd->hqk", q, k) / 4).max() > 710  # exp overflows float64 past 709.8
    for dtype, rtol in ((np.float64, 1e-9), (np.float32, 1e-3)):
        out, lse = fa.flash_attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), causal=causal,
                                      block_q=8, block_k=8)
        assert np.isfinite(out).all() and np.isfinite(lse).all()
        assert out.dtype == dtype
        # the reference sees the same rounded inputs
        expected = attention(q.astype(dtype).astype(np.float64), k.astype(dtype).astype(np.float64),
                             v.astype(dtype).astype(np.float64), causal=causal)
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_inputs_accumulate_in_float32(dtype):
    q, k, v = _qkv(np.random.default_rng(2), 50, 50, 2, 1, 16, dtype)
    out, lse = fa.flash_attention(q, k, v, block_q=16, block_k=16)
    assert out.dtype == dtype and lse.dtype == np.float32
    np.testing.assert_allclose(out.astype(np.float64), attention(q.astype(np.float64), k, v), rtol=2e-3, atol=2e-3)


def test_scale():
    q, k, v = _qkv(np.random.default_rng(3), 20, 20, 2, 2, 8)
    out, _ = fa.flash_attention(q, k, v, scale=0.05, block_q=8, block_k=8)
    np.testing.assert_allclose(out, attention(q, k, v, scale=0.05), rtol=1e-10, atol=1e-12)


def test_never_holds_the_score_matrix():
    """At T = 2048 the (T, T) float64 scores of one head are 32 MiB; the tiled pass stays far below."""
    q, k, v = _qkv(np.random.default_rng(4), 2048, 2048, 1, 1, 16)
    tracemalloc.start()
    try:
        fa.flash_attention(q, k, v, causal=False, block_q=64, block_k=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2048 * 2048 * 8 / 16, f"peak {peak / 2**20:.1f} MiB: something of (T, T) size was built"


def test_tile_schedule_non_causal_is_every_pair():
    assert fa.tile_schedule(5, 7, 2, 3, causal=False) == [(i, j, False) for i in range(3) for j in range(3)]


def test_tile_schedule_causal_square():
    # 8 queries and keys in tiles of 4: the upper-right tile is skipped, the diagonal ones masked
    assert fa.tile_schedule(8, 8, 4, 4) == [(0, 0, True), (1, 0, False), (1, 1, True)]


def test_tile_schedule_causal_bottom_right():
    # 2 queries at positions 6 and 7 of 8 keys: both tiles, the second masked (key 7 is after query 6)
    assert fa.tile_schedule(2, 8, 4, 4) == [(0, 0, False), (0, 1, True)]
    # decode: one query at the last position sees every key, nothing masked
    assert fa.tile_schedule(1, 9, 4, 4) == [(0, 0, False), (0, 1, False), (0, 2, False)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(0, 20), st.integers(1, 8), st.integers(1, 8))
def test_tile_schedule_covers_exactly_the_visible_keys(t_q, extra, bq, bk):
    t_k = t_q + extra
    visible = causal_mask(t_q, t_k)
    schedule = fa.tile_schedule(t_q, t_k, bq, bk)
    covered = np.zeros_like(visible)
    for i, j, masked in schedule:
        tile = visible[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
        assert tile.any(), f"tile {(i, j)} has no visible key and should have been skipped"
        assert masked == (not tile.all()), f"tile {(i, j)} masked={masked} but visibility is {tile.tolist()}"
        covered[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk] = True
    assert (covered >= visible).all()


def test_combine_is_the_state_of_the_union():
    rng = np.random.default_rng(5)
    scores, v = 3 * rng.standard_normal((4, 10)), rng.standard_normal((10, 3))
    whole = fa.tile_state(scores, v)
    for cut in (1, 5, 9):
        parts = fa.tile_state(scores[:, :cut], v[:cut]), fa.tile_state(scores[:, cut:], v[cut:])
        for got, expected in zip(fa.combine(*parts[0], *parts[1]), whole):
            np.testing.assert_allclose(got, expected, rtol=1e-12)
        for got, expected in zip(fa.combine(*parts[1], *parts[0]), whole):  # in either order
            np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_combine_with_empty_states():
    empty = (np.full(2, -np.inf), np.zeros(2), np.zeros((2, 3)))
    state = (np.array([1.0, -2.0]), np.array([2.0, 1.5]), np.arange(6.0).reshape(2, 3))
    for got, expected in zip(fa.combine(*empty, *state), state):
        np.testing.assert_array_equal(got, expected)
    m, l, acc = fa.combine(*empty, *empty)
    assert np.isneginf(m).all() and (l == 0).all() and (acc == 0).all()  # no NaN from -inf - (-inf)


def test_tile_state_of_a_masked_row_is_empty():
    m, l, acc = fa.tile_state(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]), np.ones((2, 2)))
    assert m[0] == -np.inf and l[0] == 0 and (acc[0] == 0).all()
    assert m[1] == 0 and l[1] == 1 and (acc[1] == 1).all()


def test_costs():
    # per head at T = 4096, hs = 128, bf16: S and P are 4 T^2 * 2 bytes, q, k, v, O 4 T hs * 2 bytes
    standard = fa.standard_attention_cost(1, 1, 4096, 128, "bf16")
    assert standard.bytes == 2 * (4 * 4096**2 + 4 * 4096 * 128)
    assert standard.flops == 4 * 4096**2 * 128 + 5 * 4096**2
    flash = fa.flash_attention_cost(2, 3, 4096, 128, "bf16")
    assert flash.flops == 4 * 6 * 4096**2 * 128 and flash.bytes == 4 * 6 * 4096 * 128 * 2
    assert fa.flash_attention_cost(2, 3, 4096, 128, "bf16", causal=True).flops == flash.flops / 2
    assert fa.scores_bytes(1, 32, 4096, "bf16") == 32 * 4096**2 * 2
    assert fa.flash_extra_bytes(1, 32, 4096) == 32 * 4096 * 4


@pytest.mark.parametrize("kwargs,match", [
    (dict(block_q=0), "block_q"),
    (dict(block_k=1.5), "block_k"),
    (dict(block_q=True), "block_q"),
])
def test_bad_blocks(kwargs, match):
    q, k, v = _qkv(np.random.default_rng(6), 4, 4, 1, 1, 2)
    with pytest.raises(ValueError, match=match):
        fa.flash_attention(q, k, v, **kwargs)


def test_bad_shapes():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, 4, 4, 2, 2, 8)
    with pytest.raises(ValueError, match="q must have 3 dimensions"):
        fa.flash_attention(q[0], k, v)
    with pytest.raises(ValueError, match="k and v"):
        fa.flash_attention(q, k, v[:3])
    with pytest.raises(ValueError, match="multiple"):
        fa.flash_attention(np.zeros((4, 3, 8)), k, v)
    with pytest.raises(ValueError, match="t_q <= t_k"):
        fa.flash_attention(np.zeros((5, 2, 8)), k, v, causal=True)
    with pytest.raises(ValueError, match="q must hold"):
        fa.flash_attention(np.zeros((0, 2, 8)), k, v)
    with pytest.raises(ValueError, match="t_q <= t_k"):
        fa.tile_schedule(5, 4, 2, 2)
    with pytest.raises(ValueError, match="t_k"):
        fa.tile_schedule(1, 0, 2, 2, causal=False)


def test_bad_states():
    m, l, acc = np.zeros(3), np.ones(3), np.zeros((3, 2))
    with pytest.raises(ValueError, match="l1"):
        fa.combine(m, np.ones(2), acc, m, l, acc)
    with pytest.raises(ValueError, match="acc2"):
        fa.combine(m, l, acc, m, l, np.zeros(3))
    with pytest.raises(ValueError, match="one shape"):
        fa.combine(m, l, acc, m[:2], l[:2], acc[:2])


@pytest.mark.parametrize("function,args,match", [
    (fa.standard_attention_cost, (0, 1, 8, 8), "batch"),
    (fa.flash_attention_cost, (1, 1, 8, -1), "head_size"),
    (fa.scores_bytes, (1, 1.0, 8), "n_heads"),
    (fa.flash_extra_bytes, (1, 1, 0), "t"),
    (fa.standard_attention_cost, (1, 1, 8, 8, "int3"), "dtype"),
])
def test_bad_cost_arguments(function, args, match):
    with pytest.raises(ValueError, match=match):
        function(*args)


def _loss(q, k, v, d_out, causal):
    return float((attention(q, k, v, causal=causal) * d_out).sum())


@pytest.mark.parametrize("t_q,t_k,nh,nkv,hs,bq,bk,causal", SHAPES)
def test_backward_is_the_gradient(t_q, t_k, nh, nkv, hs, bq, bk, causal):
    """Against central differences of sum(attention * d_out) along a random direction, for q, k and v."""
    rng = np.random.default_rng(t_q * 7 + t_k)
    q, k, v = _qkv(rng, t_q, t_k, nh, nkv, hs)
    d_out = rng.standard_normal(q.shape)
    out, lse = fa.flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    grads = fa.flash_attention_backward(q, k, v, out, lse, d_out, causal=causal, block_q=bq, block_k=bk)
    eps = 1e-6
    for index, grad in enumerate(grads):
        assert grad.shape == (q, k, v)[index].shape
        direction = rng.standard_normal(grad.shape)
        plus, minus = [list((q, k, v)) for _ in range(2)]
        plus[index] = plus[index] + eps * direction
        minus[index] = minus[index] - eps * direction
        numeric = (_loss(*plus, d_out, causal) - _loss(*minus, d_out, causal)) / (2 * eps)
        assert np.isclose((grad * direction).sum(), numeric, rtol=1e-6, atol=1e-7), index


def test_backward_in_float32_and_bad_shapes():
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, 40, 40, 4, 2, 8, np.float32)
    d_out = rng.standard_normal(q.shape).astype(np.float32)
    out, lse = fa.flash_attention(q, k, v, block_q=16, block_k=16)
    dq, dk, dv = fa.flash_attention_backward(q, k, v, out, lse, d_out, block_q=16, block_k=16)
    exact = fa.flash_attention_backward(*(x.astype(np.float64) for x in (q, k, v, out, lse, d_out)),
                                        block_q=16, block_k=16)
    assert dq.dtype == np.float32
    for got, want in zip((dq, dk, dv), exact):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="lse"):
        fa.flash_attention_backward(q, k, v, out, lse[:, :2], d_out)
    with pytest.raises(ValueError, match="d_out"):
        fa.flash_attention_backward(q, k, v, out, lse, d_out[:3])
