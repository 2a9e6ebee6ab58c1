# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: FlashAttention's forward pass in numpy
#
# **You will learn** how attention can be computed one tile at a time without ever holding the
# $T_q \times T_k$ matrix of scores: the **online softmax** state $(m, \ell, acc)$ of a row, how two
# states over different keys combine exactly, which tiles causal attention can skip, and why
# the result stays finite when the scores are in the thousands.
#
# Attention for one head is $O = \mathrm{softmax}(S)\,V$ with $S = q k^\top / \sqrt{hs}$. Written
# plainly, $S$ and $P = \mathrm{softmax}(S)$ are $T_q \times T_k$ matrices: 4096 x 4096 per head at
# $T = 4096$, which a GPU must write to its HBM and read back, while $q$, $k$, $v$ and $O$ are only
# $4096 \times hs$ each. FlashAttention (Dao et al., NeurIPS 2022; FlashAttention-2, Dao 2023)
# cuts $q$ into tiles of `block_q` rows (outer loop) and $k$, $v$ into tiles of `block_k` rows
# (inner loop) and keeps, for every query row, three things about the keys seen so far:
#
# - $m$: the largest score so far,
# - $\ell = \sum_j e^{s_j - m}$,
# - $acc = \sum_j e^{s_j - m}\, v_j$ (a vector of $hs$ numbers, **not** yet divided by $\ell$).
#
# After the last key tile, $O = acc / \ell$: exactly softmax attention. This is the online
# softmax of Milakov and Gimelshein (2018), carried over to the weighted sum of $v$.
#
# Everything here is one head: `q` is $(T_q, hs)$, `k` and `v` are $(T_k, hs)$. **Causal** attention
# follows the chapter's bottom-right convention: the queries are the *last* $T_q$ of the $T_k$
# positions, so query $i$ sits at position $T_k - T_q + i$ and sees the keys $j \le T_k - T_q + i$
# (prefill $T_q = T_k$; decode $T_q = 1$ sees every key; a prefill chunk in between). Compute in
# float32 for float32 inputs and float64 for float64 (`np.promote_types(q.dtype, np.float32)`).
#
# Write the functions yourself: when grading, `aisys.inference.flash_attention` (the reference)
# cannot be imported. The point of the exercise is that no array of size $T_q \times T_k$ exists at
# any time, only tiles of `block_q` x `block_k`: the grader runs your `flash_attention` again, from
# your notebook's source, measuring its memory (`tracemalloc`) and counting its calls of
# `tile_state`. That run accepts numpy and `math` only (no other imports, no classes, no `with`).

# %%
import math

import numpy as np
from aisys_grader import checker

check = checker("07-inference/flash_attention", globals())


def naive_attention(q, k, v, causal):
    """softmax(q k^T / sqrt(hs)) v for one head, the (Tq, Tk) matrix in full, in float64: to compare with."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scores = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        t_q, t_k = len(q), len(k)
        visible = np.arange(t_k)[None, :] <= np.arange(t_k - t_q, t_k)[:, None]
        scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=1, keepdims=True)
    p = np.exp(scores - top)
    return p @ v / p.sum(axis=1, keepdims=True)


# %% [markdown]
# ## 1. The state of one tile
#
# For a tile of scores `scores` (rows, cols) and the matching rows of `v` (cols, hs), return
# `(m, l, acc)`: `m` (rows,) the row maxima, `l` (rows,) the sums of `exp(scores - m)`, and `acc`
# (rows, hs) $= e^{S - m} v$. Subtracting the row's own maximum makes every exponent $\le 0$, so
# nothing overflows however large the scores are ($e^{x}$ is `inf` in float32 past $x = 88.7$, in
# float64 past $709.8$).
#
# A causal tile can hold a row whose scores are **all** `-inf` (every key of the tile lies after
# that query). Its state must be the empty one, $(-\infty, 0, 0)$: but `scores - m` is then
# $-\infty - (-\infty) = $ NaN. Subtract 0 instead where `m` is `-inf`
# (`np.where(np.isneginf(m), 0.0, m)`): $e^{-\infty - 0} = 0$.

# %% tags=["solution"]
def tile_state(scores, v):
    """(m, l, acc) of one tile: row max, sum of exp(scores - m), and exp(scores - m) @ v; (-inf, 0, 0) for a
    row of only -inf."""
    ### BEGIN SOLUTION
    m = scores.max(axis=1)
    p = np.exp(scores - np.where(np.isneginf(m), 0.0, m)[:, None])
    return m, p.sum(axis=1), p @ v
    ### END SOLUTION


# %%
print(tile_state(np.array([[1.0, 2.0, 3.0], [1000.0, 999.0, -np.inf], [-np.inf, -np.inf, -np.inf]]),
                 np.eye(3)))

# %% tags=["check"]
check("tile_state")
### BEGIN HIDDEN TESTS
check("tile_state", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Combining two states
#
# Two states over disjoint sets of keys, $(m_1, \ell_1, acc_1)$ and $(m_2, \ell_2, acc_2)$, give the
# state over all of them. The new maximum is $m = \max(m_1, m_2)$. Side 1 was taken against $m_1$,
# and $e^{s - m_1} = e^{s - m}\, e^{m - m_1}$, so its terms must be multiplied by $e^{m_1 - m} \le 1$:
#
# $$\ell = e^{m_1 - m}\,\ell_1 + e^{m_2 - m}\,\ell_2, \qquad
#   acc = e^{m_1 - m}\,acc_1 + e^{m_2 - m}\,acc_2 .$$
#
# Both $\ell$ **and** $acc$ are rescaled: they are sums of the same terms, one weighted by $v$.
# Shapes: `m` and `l` (rows,), `acc` (rows, hs). Where both sides are empty ($m_1 = m_2 = -\infty$)
# the result is empty too, not NaN: use the same stand-in for $m$ as above.
# This is exact: combining tile by tile, in any grouping, gives the state of the whole row.

# %% tags=["solution"]
def combine(m1, l1, acc1, m2, l2, acc2):
    """The state (m, l, acc) over the keys of both states."""
    ### BEGIN SOLUTION
    m = np.maximum(m1, m2)
    safe = np.where(np.isneginf(m), 0.0, m)
    scale1, scale2 = np.exp(m1 - safe), np.exp(m2 - safe)
    return m, scale1 * l1 + scale2 * l2, scale1[:, None] * acc1 + scale2[:, None] * acc2
    ### END SOLUTION


# %% [markdown]
# The state of a row cut in two, combined, equals the state of the whole row:

# %%
_scores, _v = np.array([[0.5, 3.0, -1.0, 2.0]]), np.arange(8.0).reshape(4, 2)
print(combine(*tile_state(_scores[:, :2], _v[:2]), *tile_state(_scores[:, 2:], _v[2:])))
print(tile_state(_scores, _v))

# %% tags=["check"]
check("combine")
### BEGIN HIDDEN TESTS
check("combine", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Which tiles to compute
#
# Number the query tiles $i = 0, 1, \dots$ (rows $i \cdot$ `block_q` to $(i+1)\cdot$`block_q` $- 1$,
# the last one shorter when `block_q` does not divide $T_q$) and the key tiles $j$ likewise. Return
# the list of `(i, j, masked)` triples to compute, $i$ outer and $j$ inner, in increasing order:
#
# - not causal: every pair, `masked` False;
# - causal: pair $(i, j)$ only if its first key is visible to the tile's **last** query (otherwise
#   every key of the tile, and of every later tile, lies after every query: skip them all);
#   `masked` is True when some key of the tile lies after the tile's **first** query, so the mask
#   must be applied, False when every query sees every key of the tile.
#
# At $T_q = T_k$ causal attention computes about half the tiles. Remember the positions: query row
# $r$ is at position $T_k - T_q + r$.

# %% tags=["solution"]
def tile_pairs(t_q, t_k, block_q, block_k, causal):
    """The (q tile, k tile, masked) triples FlashAttention computes, q tiles outer."""
    ### BEGIN SOLUTION
    pairs = []
    for i in range(math.ceil(t_q / block_q)):
        first_query = t_k - t_q + i * block_q
        last_query = t_k - t_q + min((i + 1) * block_q, t_q) - 1
        for j in range(math.ceil(t_k / block_k)):
            first_key, last_key = j * block_k, min((j + 1) * block_k, t_k) - 1
            if not causal:
                pairs.append((i, j, False))
            elif first_key > last_query:
                break
            else:
                pairs.append((i, j, last_key > first_query))
    return pairs
    ### END SOLUTION


# %%
print(tile_pairs(8, 8, 4, 4, causal=True))  # the upper-right tile is skipped, the two diagonal ones masked
print(tile_pairs(2, 8, 4, 4, causal=True))  # two queries at positions 6 and 7

# %% tags=["check"]
check("tile_pairs")
### BEGIN HIDDEN TESTS
check("tile_pairs", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The forward pass
#
# Put it together. For each query tile, start from the empty state $m = -\infty$, $\ell = 0$,
# $acc = 0$; for each of its key tiles from `tile_pairs`, compute the tile of scores
# `q_tile @ k_tile.T / sqrt(hs)`, set the invisible ones to `-inf` when the tile is `masked`, and
# fold `tile_state(...)` into the running state with `combine`. After the last key tile, the
# tile's rows of the output are $acc / \ell$ (divide **once**, at the end), and the log-sum-exp
# of each row is $m + \log \ell$: the logarithm of $\sum_j e^{s_j}$, which the backward pass keeps
# (natural log; it is what makes the backward recompute $P$ tile by tile without storing it).
#
# Return `(out, lse)`: `out` $(T_q, hs)$ in q's dtype, `lse` $(T_q,)$. Nothing of size $T_q \times T_k$.

# %% tags=["solution"]
def flash_attention(q, k, v, causal, block_q, block_k):
    """softmax(q k^T / sqrt(hs)) v for one head, tile by tile with the online softmax: (out (Tq, hs), lse (Tq,))."""
    ### BEGIN SOLUTION
    dtype = np.promote_types(q.dtype, np.float32)
    t_q, head_size = q.shape
    t_k = k.shape[0]
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    scale = dtype.type(1 / math.sqrt(head_size))
    out = np.empty((t_q, head_size), dtype)
    lse = np.empty(t_q, dtype)
    states = {}
    for i, j, masked in tile_pairs(t_q, t_k, block_q, block_k, causal):
        rows = np.arange(i * block_q, min((i + 1) * block_q, t_q))
        cols = np.arange(j * block_k, min((j + 1) * block_k, t_k))
        scores = q[rows] @ k[cols].T * scale
        if masked:
            scores = np.where(cols[None, :] <= (t_k - t_q + rows)[:, None], scores, -np.inf)
        empty = (np.full(len(rows), -np.inf, dtype), np.zeros(len(rows), dtype),
                 np.zeros((len(rows), head_size), dtype))
        states[i] = combine(*states.get(i, empty), *tile_state(scores, v[cols]))
    for i, (m, l, acc) in states.items():
        rows = slice(i * block_q, min((i + 1) * block_q, t_q))
        out[rows] = acc / l[:, None]
        lse[rows] = m + np.log(l)
    return out.astype(q.dtype), lse
    ### END SOLUTION


# %% [markdown]
# Against the plain computation, on a causal prefill, a decode step and scores in the thousands
# (where $e^{s}$ overflows even float64):

# %%
rng = np.random.default_rng(0)
q, k, v = rng.standard_normal((50, 16)), rng.standard_normal((50, 16)), rng.standard_normal((50, 16))
print(np.abs(flash_attention(q, k, v, True, 16, 8)[0] - naive_attention(q, k, v, True)).max())
print(np.abs(flash_attention(q[-1:], k, v, True, 16, 8)[0] - naive_attention(q[-1:], k, v, True)).max())
print(np.abs(flash_attention(1000 * q, k, v, False, 16, 8)[0] - naive_attention(1000 * q, k, v, False)).max())

# %% tags=["check"]
check("flash_attention")
### BEGIN HIDDEN TESTS
check("flash_attention", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_attention_decode")
### BEGIN HIDDEN TESTS
check("flash_attention_decode", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_attention_large_logits")
### BEGIN HIDDEN TESTS
check("flash_attention_large_logits", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# How the pass runs: at $T_q = T_k = 1024$ one float64 score matrix takes 8 MiB, while the tiles and
# the running states of the tiled pass take well under 1 MiB; and a causal pass computes only the
# tiles `tile_pairs` lists, one `tile_state` each.

# %% tags=["check"]
check("flash_attention_memory")
### BEGIN HIDDEN TESTS
check("flash_attention_memory", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("flash_attention_causal_tiles")
### BEGIN HIDDEN TESTS
check("flash_attention_causal_tiles", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## What a GPU does with this
#
# On a GPU each query tile is one program (a thread block): its $q$ tile, $m$, $\ell$ and $acc$ stay
# in registers while the key and value tiles stream through shared memory, and the two products
# run on the Tensor Cores. The only memory traffic is reading $q$, $k$, $v$ and writing $O$ and
# the log-sum-exp: for $T = 4096$, $hs = 128$ in bf16, about 4 MiB per head instead of the
# 128 MiB that writing and re-reading $S$ and $P$ would cost. The exercise
# `07-inference/triton_flash_attention` writes that kernel.
