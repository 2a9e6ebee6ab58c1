"""FlashAttention: the memory standard attention spends on scores, the I/O bound Θ(N d + N^2) against
Θ(N^2 d^2 / M), tile sizes from the SRAM budget, the online softmax and the recomputing backward pass
(aisys.inference.flash_attention)."""

import math

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.flash_attention import (LSE_BYTES, flash_attention_cost, flash_extra_bytes, scores_bytes,
                                             standard_attention_cost)
from aisys.inference.model import LLAMA_3_8B
from aisys.occupancy import H100 as H100_SM

from ..card import Ask, Choice, Number, Several, card

PAGE = "07-inference/flash-attention"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
BF16 = bytes_per_element("bf16")
HEADS, HEAD_SIZE = LLAMA_3_8B.n_heads, LLAMA_3_8B.head_dim


def _sram_elements() -> int:
    """M of Dao et al.'s model on an H100: one SM's shared memory, in BF16 elements."""
    return int(H100_SM.shared_per_sm // BF16)


@card(topic="attention", difficulty="medium", frequency="high", page=PAGE)
def attention_io_complexity():
    options = ("standard Θ(N d + N^2), FlashAttention Θ(N^2 d^2 / M)", "standard Θ(N^2 d), FlashAttention Θ(N d)",
               "both Θ(N^2 d); FlashAttention only saves FLOPs", "standard Θ(N d), FlashAttention Θ(N^2 / M)")
    m = _sram_elements()
    return Ask(
        "For sequence length N, head size d and on-chip SRAM of M elements (d <= M <= N d), how many HBM accesses "
        "do standard attention and FlashAttention make (Dao et al., 2022, Theorem 2)?",
        Choice(options, 0),
        "Standard attention writes the N x N scores S and probabilities P to HBM and reads them back: Θ(N d + N^2). "
        "FlashAttention keeps tiles of Q, K, V and O in SRAM, with K and V tiles of about M / 4d rows, and reads "
        "all of K and V once per Q tile: N / B_r passes over Θ(N d), Θ(N^2 d^2 / M). With d = "
        f"{HEAD_SIZE} and M = {m:,} BF16 elements (an H100 SM's shared memory), d^2 / M = "
        f"{HEAD_SIZE**2 / m:.2f}: several times fewer accesses than N^2. No exact algorithm does o(N^2 d^2 / M) "
        "for all M (their Proposition 3).")


@card(topic="attention", difficulty="hard", frequency="medium", page=PAGE)
def flash_attention_d2_over_m():
    m = _sram_elements()
    return Ask(
        f"In Dao et al.'s I/O model, FlashAttention's HBM accesses relative to standard attention's N^2 term are "
        f"about d^2 / M. What is d^2 / M for head size d = {HEAD_SIZE} with M one H100 SM's shared memory in BF16 "
        "elements?",
        Number(HEAD_SIZE**2 / m, rel=0.03, unit=""),
        f"M = {H100_SM.shared_per_sm // 1024} KiB / {BF16:g} bytes = {m:,} elements; d^2 = {HEAD_SIZE**2:,}; "
        f"d^2 / M = {HEAD_SIZE**2 / m:.3f}, about 1/{m / HEAD_SIZE**2:.0f}. At d = {HEAD_SIZE // 2} it is "
        f"{(HEAD_SIZE // 2)**2 / m:.3f}. The saving shrinks as heads grow: d^2 / M reaches 1 at "
        f"d = {math.isqrt(m)}.")


@card(topic="attention", difficulty="easy", frequency="high", page=PAGE)
def attention_scores_memory():
    t = 8192
    size = scores_bytes(1, HEADS, t)
    return Ask(
        f"Standard attention materialises the T x T scores of every head. For one sequence of T = {t:,} tokens "
        f"with {HEADS} heads, in BF16, how large is that score matrix, per layer, in GB?",
        Number(size / 10**9, rel=0.02, unit="GB"),
        f"{HEADS} heads x {t:,}^2 x {BF16:g} bytes = {prose.rate(size, 'B')} per layer, against "
        f"{prose.rate(4 * t * HEADS * HEAD_SIZE * BF16, 'B')} for Q, K, V and O (4 x T x {HEADS} x {HEAD_SIZE} x "
        f"{BF16:g} bytes). It grows with T^2: FlashAttention never writes it.")


@card(topic="attention", difficulty="medium", frequency="medium", page=PAGE)
def flash_attention_extra_memory():
    t = 8192
    extra = flash_extra_bytes(1, HEADS, t)
    return Ask(
        f"Beyond Q, K, V and O, what does FlashAttention's forward pass store for the backward pass, for one "
        f"sequence of {t:,} tokens with {HEADS} heads? Give the bytes in MiB.",
        Number(extra / 2**20, rel=0.02, unit="MiB"),
        f"One FP32 log-sum-exp per query and head, m + log(l): {HEADS} x {t:,} x {LSE_BYTES} bytes = "
        f"{extra / 2**20:g} MiB, against {prose.rate(scores_bytes(1, HEADS, t), 'B')} of scores standard attention "
        "keeps. From it the backward pass recomputes P tile by tile.")


@card(topic="attention", difficulty="hard", frequency="low", page=PAGE)
def dao_tile_sizes():
    m = _sram_elements()
    keys = math.ceil(m / (4 * HEAD_SIZE))
    return Ask(
        f"FlashAttention (Dao et al., Algorithm 1) takes K/V tiles of B_c = ceil(M / 4d) rows and Q tiles of B_r = "
        f"min(B_c, d). With M = {m:,} BF16 elements (an H100 SM's shared memory) and d = {HEAD_SIZE}, what is B_r?",
        Number(min(keys, HEAD_SIZE), rel=0.01, unit="rows"),
        f"B_c = ceil({m:,} / (4 x {HEAD_SIZE})) = {keys}; B_r = min({keys}, {HEAD_SIZE}) = {min(keys, HEAD_SIZE)}. "
        "The 4d in the denominator makes room for a tile of each of Q, K, V and O at once. Real kernels "
        "(FlashAttention-2, Triton's tutorial) choose their tiles by registers more than by shared memory: the "
        "accumulator and the score tile live in registers.")


@card(topic="attention", difficulty="hard", frequency="medium", page=PAGE)
def attention_traffic_ratio():
    t = 4096
    standard = standard_attention_cost(1, HEADS, t, HEAD_SIZE)
    flash = flash_attention_cost(1, HEADS, t, HEAD_SIZE)
    return Ask(
        f"One layer of Llama-3-8B's attention ({HEADS} heads of size {HEAD_SIZE}, T = {t:,}, BF16): how many times "
        "the bytes of FlashAttention (Q, K, V read once, O written once) does standard attention in three kernels "
        "move through HBM?",
        Number(standard.bytes / flash.bytes, rel=0.03, unit="x"),
        f"Standard: S = Q K^T written, read by softmax, P written, read by P V: {prose.rate(standard.bytes, 'B')}, "
        f"dominated by the 4 T^2 per head of S and P. FlashAttention: 4 T d per head, {prose.rate(flash.bytes, 'B')}. "
        f"Ratio {standard.bytes / flash.bytes:.1f}. The FLOPs are the same, {prose.rate(flash.flops, 'FLOP')}, so "
        f"the intensity rises from {standard.intensity:.0f} to {flash.intensity:,.0f} FLOP/byte, across the "
        f"H100's ridge of {H100.ridge_point('bf16'):.0f}.")


@card(topic="attention", difficulty="medium", frequency="high", page=PAGE)
def online_softmax_state():
    options = ("the running maximum m of the scores seen so far",
               "the running sum l of exp(score - m)",
               "the running weighted sum of V, not yet divided by l",
               "the full row of scores, to normalise at the end",
               "the softmax probabilities of the previous tile")
    return Ask(
        "FlashAttention's online softmax processes a row's keys tile by tile. What does it keep per query row "
        "between tiles?",
        Several(options, frozenset({0, 1, 2})),
        "Three things, O(d) per row: m, l and acc. A new tile with max m' rescales the old state by exp(m - m_new) "
        "and adds its own exp(s - m_new) terms; after the last tile, O = acc / l, and m + log l is the log-sum-exp "
        "the backward pass needs. Keeping the row of scores would cost O(N) per row, which is what it avoids.")


@card(topic="attention", difficulty="medium", frequency="medium", page=PAGE)
def flash_attention_backward():
    t = 8192
    options = ("it recomputes S and P tile by tile from Q, K and the saved log-sum-exp",
               "it stores P in HBM during the forward pass, like standard attention",
               "it approximates P with a low-rank factorisation",
               "it skips the gradient of the softmax")
    return Ask(
        "How does FlashAttention's backward pass get the attention probabilities P it needs?",
        Choice(options, 0),
        "It stores only O and the log-sum-exp per row, and recomputes S = Q K^T and P = exp(S - lse) per tile: "
        f"for {HEADS} heads at T = {t:,}, {prose.rate(flash_extra_bytes(1, HEADS, t), 'B')} kept instead of "
        f"{prose.rate(scores_bytes(1, HEADS, t), 'B')} of P. The extra FLOPs cost less than the bytes saved: "
        "attention is memory-bound when P goes through HBM.")


@card(topic="attention", difficulty="easy", frequency="medium", page=PAGE)
def causal_attention_flops():
    t = 8192
    full = flash_attention_cost(1, HEADS, t, HEAD_SIZE)
    causal = flash_attention_cost(1, HEADS, t, HEAD_SIZE, causal=True)
    return Ask(
        f"How many FLOPs does one layer of causal attention take for one sequence of T = {t:,} tokens, {HEADS} heads "
        f"of size {HEAD_SIZE} (Q K^T and P V, skipping the masked half), in GFLOP?",
        Number(causal.flops / 10**9, rel=0.02, unit="GFLOP"),
        f"Q K^T and P V are 2 T^2 d FLOPs each per head: 4 x {HEADS} x {t:,}^2 x {HEAD_SIZE} = "
        f"{prose.rate(full.flops, 'FLOP')}; the causal mask skips the tiles above the diagonal, half: "
        f"{prose.rate(causal.flops, 'FLOP')}, {prose.duration(causal.flops / H100.peak('bf16'))} at the H100's BF16 "
        "peak.")
