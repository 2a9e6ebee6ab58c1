"""Tests of aisys.inference.speculative: the output of speculative sampling follows the target exactly.

Exactness is tested statistically with Pearson's chi-square test at a significance of 1e-7: a
correct sampler fails one test with probability 1e-7 (and the seeds are fixed, so these tests
are deterministic). Each test also shows that the sample is large enough: the typical wrong
rules give a chi-square statistic whose expected excess over the critical value is at least 6
standard deviations, and they do fail at that size.
"""

import math

import numpy as np
import pytest

from aisys.inference import model, speculative
from aisys.inference.speculative import (acceptance_rate, chi_square_sf, expected_accepted, goodness_of_fit,
                                         sample, speedup, verify)

SIGNIFICANCE = 1e-7
P = np.array([0.40, 0.25, 0.20, 0.10, 0.05])  # target
Q = np.array([0.10, 0.15, 0.20, 0.25, 0.30])  # draft: alpha = 0.6


def critical_value(df: int, significance: float = SIGNIFICANCE) -> float:
    """x with chi_square_sf(x, df) = significance, by bisection."""
    low, high = 0.0, 1000.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if chi_square_sf(middle, df) > significance else (low, middle)
    return high


def draws(probs, size: int, rng) -> np.ndarray:
    return rng.choice(len(probs), size=size, p=probs)


def first_tokens(rule, p, q, k: int, trials: int, seed: int) -> np.ndarray:
    """The first output token of `trials` verify calls with k drafts, every position drafted from q against p."""
    rng = np.random.default_rng(seed)
    q_rows, p_rows = np.tile(q, (k, 1)), np.tile(p, (k + 1, 1))
    return np.array([rule(list(draws(q, k, rng)), q_rows, p_rows, rng)[0] for _ in range(trials)])


# Two typical wrong rules, and the first-token distribution each gives (derived by hand).
def accept_if_more_likely(drafts, q, p, rng):
    """Keeps a draft whenever p(x) >= q(x) and rejects it otherwise: deterministic, biased towards q."""
    for i, x in enumerate(drafts):
        if p[i, x] < q[i, x]:
            return drafts[:i] + [sample(np.maximum(p[i] - q[i], 0), rng)]
    return drafts + [sample(p[len(drafts)], rng)]


def resample_from_target(drafts, q, p, rng):
    """Draws the replacement of a rejected draft from p instead of the residual max(0, p - q)."""
    for i, x in enumerate(drafts):
        if rng.random() * q[i, x] >= p[i, x]:
            return drafts[:i] + [sample(p[i], rng)]
    return drafts + [sample(p[len(drafts)], rng)]


def first_token_law_of(rule, p, q) -> np.ndarray:
    if rule is accept_if_more_likely:
        kept = np.where(p >= q, q, 0.0)
        residual = np.maximum(p - q, 0)
        return kept + (1 - kept.sum()) * residual / residual.sum()
    kept = np.minimum(p, q)
    return kept + (1 - kept.sum()) * p


# ------------------------------------------------------------------------------------ chi-square

@pytest.mark.parametrize("df, x", [(1, 3.841458820694124), (2, 5.991464547107979), (4, 9.487729036781154),
                                   (5, 11.070497693516351), (10, 18.307038053275146), (25, 37.65248413348277)])
def test_chi_square_sf_gives_the_tabulated_5_percent_points(df, x):
    assert chi_square_sf(x, df) == pytest.approx(0.05, rel=1e-9)


def test_chi_square_sf_edges():
    assert chi_square_sf(0.0, 3) == 1.0
    assert chi_square_sf(1e4, 3) == 0.0
    assert chi_square_sf(2.0, 2) == pytest.approx(math.exp(-1))


def test_goodness_of_fit_pools_small_cells_and_refuses_impossible_tokens():
    assert goodness_of_fit([50, 50, 0], [0.5, 0.5, 0.0]) == 1.0
    assert goodness_of_fit([50, 49, 1], [0.5, 0.5, 0.0]) == 0.0  # a token of probability 0 came out
    assert goodness_of_fit([100], [1.0]) == 1.0
    assert goodness_of_fit([1000, 0], [0.5, 0.5]) < 1e-100


def test_goodness_of_fit_is_calibrated():
    """Under the null, p-values are uniform: about 5% of them fall below 0.05."""
    rng = np.random.default_rng(3)
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    p_values = [goodness_of_fit(np.bincount(draws(probs, 2000, rng), minlength=4), probs) for _ in range(2000)]
    assert 0.035 < np.mean(np.array(p_values) < 0.05) < 0.065


# -------------------------------------------------------------------------------------- verify

def test_verify_keeps_a_prefix_of_the_drafts_and_adds_one_token():
    rng = np.random.default_rng(0)
    for k in range(6):
        drafts = list(draws(Q, k, rng))
        for _ in range(50):
            out = verify(drafts, np.tile(Q, (k, 1)), np.tile(P, (k + 1, 1)), rng)
            assert 1 <= len(out) <= k + 1 and out[:-1] == drafts[:len(out) - 1]
            assert all(isinstance(t, int) for t in out)


def test_verify_accepts_everything_when_draft_equals_target():
    rng = np.random.default_rng(1)
    for _ in range(200):
        drafts = list(draws(P, 4, rng))
        out = verify(drafts, np.tile(P, (4, 1)), np.tile(P, (5, 1)), rng)
        assert len(out) == 5 and out[:4] == drafts


def test_verify_never_yields_a_token_the_target_rules_out():
    p = np.array([0.0, 0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.25, 0.25])
    rng = np.random.default_rng(2)
    outs = [verify(list(draws(q, 3, rng)), np.tile(q, (3, 1)), np.tile(p, (4, 1)), rng) for _ in range(500)]
    assert not {0, 3} & {t for out in outs for t in out}


def test_verify_greedy_distributions_keep_the_targets_argmax():
    p, q = np.eye(4)[2], np.eye(4)[1]  # temperature 0: one-hot
    assert verify([1], q[None], np.stack([p, p]), np.random.default_rng(0)) == [2]
    assert verify([2], p[None], np.stack([p, q]), np.random.default_rng(0)) == [2, 1]


@pytest.mark.parametrize("k", [0, 1, 3])
def test_first_token_follows_the_target_exactly(k):
    tokens = first_tokens(verify, P, Q, k, 20_000, seed=10 + k)
    assert goodness_of_fit(np.bincount(tokens, minlength=5), P) > SIGNIFICANCE


@pytest.mark.parametrize("p, q", [
    (np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.2, 0.4, 0.4])),  # q is 0 where p > 0, and the other way
    (np.array([0.05, 0.05, 0.1, 0.8]), np.array([0.7, 0.1, 0.1, 0.1])),
])
def test_first_token_follows_the_target_when_supports_differ(p, q):
    tokens = first_tokens(verify, p, q, 2, 10_000, seed=4)
    assert goodness_of_fit(np.bincount(tokens, minlength=4), p) > SIGNIFICANCE


@pytest.mark.parametrize("rule", [accept_if_more_likely, resample_from_target])
def test_the_first_token_test_is_large_enough_to_catch_wrong_rules(rule):
    """At 20,000 trials each wrong rule's expected statistic exceeds the critical value by >= 6 sd; and it fails."""
    trials, df = 20_000, len(P) - 1
    wrong = first_token_law_of(rule, P, Q)
    noncentrality = trials * ((wrong - P) ** 2 / P).sum()
    mean, sd = df + noncentrality, math.sqrt(2 * (df + 2 * noncentrality))  # the noncentral chi-square's
    assert (mean - critical_value(df)) / sd > 6
    tokens = first_tokens(rule, P, Q, 2, trials, seed=5)
    assert np.bincount(tokens, minlength=5) / trials == pytest.approx(wrong, abs=0.02)  # the law derived above
    assert goodness_of_fit(np.bincount(tokens, minlength=5), P) < SIGNIFICANCE


def chain(rule, target_table, draft_table, n: int, k: int, rng) -> list[int]:
    """n tokens of a bigram model (row c: the next token's law after c), starting after token 0."""
    text = [0]
    while len(text) <= n:
        drafts = []
        for _ in range(k):
            drafts.append(sample(draft_table[(text + drafts)[-1]], rng))
        contexts = [text[-1]] + drafts  # what each draft, and the token after the last, follows
        text += rule(drafts, draft_table[contexts[:-1]], target_table[contexts], rng)
    return text[1:n + 1]


TARGET_TABLE = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3]])
DRAFT_TABLE = np.array([[0.2, 0.3, 0.5], [0.5, 0.4, 0.1], [0.3, 0.3, 0.4]])


def joint_law(table, n: int) -> np.ndarray:
    """P(x1 .. xn) of the bigram chain after token 0, flattened in C order."""
    law = table[0]
    for _ in range(n - 1):
        law = law[..., None] * table  # [..., a, b] = P(..., a) * P(b after a)
    return law.ravel()


@pytest.mark.parametrize("rule, exact", [(verify, True), (resample_from_target, False)])
def test_text_follows_the_target_jointly_across_verify_calls(rule, exact):
    """The joint law of three tokens, which one or two verify calls produce, is the target chain's."""
    rng = np.random.default_rng(7)
    texts = np.array([chain(rule, TARGET_TABLE, DRAFT_TABLE, 3, 2, rng) for _ in range(8000)])
    counts = np.bincount(np.ravel_multi_index(texts.T, (3, 3, 3)), minlength=27)
    p_value = goodness_of_fit(counts, joint_law(TARGET_TABLE, 3))
    assert (p_value > SIGNIFICANCE) if exact else (p_value < SIGNIFICANCE)


def test_mean_tokens_per_call_matches_the_formula():
    rng = np.random.default_rng(8)
    k, trials = 4, 20_000
    lengths = np.array([len(verify(list(draws(Q, k, rng)), np.tile(Q, (k, 1)), np.tile(P, (k + 1, 1)), rng))
                        for _ in range(trials)])
    standard_error = lengths.std() / math.sqrt(trials)
    assert abs(lengths.mean() - expected_accepted(acceptance_rate(P, Q), k)) < 5 * standard_error


def test_sample_follows_its_weights_and_skips_zeros():
    rng = np.random.default_rng(9)
    weights = np.array([0.0, 2.0, 0.0, 1.0, 1.0])
    counts = np.bincount([sample(weights, rng) for _ in range(8000)], minlength=5)
    assert counts[0] == counts[2] == 0
    assert goodness_of_fit(counts, weights / weights.sum()) > SIGNIFICANCE


# ------------------------------------------------------------------------------------- formulas

def test_acceptance_rate():
    assert acceptance_rate(P, Q) == pytest.approx(0.6)
    assert acceptance_rate(P, P) == pytest.approx(1.0)
    assert acceptance_rate([1.0, 0.0], [0.0, 1.0]) == 0.0


@pytest.mark.parametrize("alpha, k, expected", [(0.6, 0, 1.0), (0.6, 1, 1.6), (0.6, 3, 1 + 0.6 + 0.36 + 0.216),
                                                (0.0, 5, 1.0), (1.0, 4, 5.0), (0.8, 4, (1 - 0.8**5) / 0.2)])
def test_expected_accepted(alpha, k, expected):
    assert expected_accepted(alpha, k) == pytest.approx(expected, rel=1e-12)


def test_speedup_is_leviathans_theorem():
    # alpha 0.8, k 4 drafts, a draft step 5% of a target step
    assert speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2))
    assert speedup(0.5, 0, 0.3) == 1.0  # no drafts: plain decoding
    assert speedup(1.0, 3, 0.0) == 4.0


# ------------------------------------------------------------------------------ the tiny model

TARGET = model.Transformer(seed=0)
PROMPT = [1, 2, 3, 4, 5]


def test_greedy_speculative_decoding_gives_the_targets_greedy_text():
    draft = speculative.perturbed(TARGET, 0.3)
    result = speculative.speculative_generate(TARGET, draft, PROMPT, 12, 3, temperature=0, seed=0)
    text = list(PROMPT)
    for _ in range(12):
        text.append(int(TARGET.forward(text)[-1].argmax()))
    assert result["tokens"] == text[len(PROMPT):]
    assert result["target_calls"] < 12  # some drafts were kept


def test_a_perfect_draft_is_always_accepted():
    result = speculative.speculative_generate(TARGET, speculative.perturbed(TARGET, 0.0), PROMPT, 10, 4, seed=1)
    assert result["accepted"] == [4, 4] and result["acceptance_rate"] == 1.0 and result["target_calls"] == 2
    assert result["draft_calls"] == 8 and len(result["tokens"]) == 10


def test_a_perturbed_draft_is_accepted_often_but_not_always():
    draft = speculative.perturbed(TARGET, 0.2)
    result = speculative.speculative_generate(TARGET, draft, PROMPT, 40, 4, temperature=0.7, seed=2)
    assert 0.5 < result["acceptance_rate"] < 0.95
    assert len(result["tokens"]) == 40 and all(0 <= t < 256 for t in result["tokens"])


def test_perturbed_with_no_noise_is_the_model():
    copy = speculative.perturbed(TARGET, 0.0)
    np.testing.assert_array_equal(copy.forward(PROMPT), TARGET.forward(PROMPT))


# ------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("args, match", [
    (([1], [[0.5, 0.5]], [[0.5, 0.5]]), "target_probs must be a \\(2, V\\)"),
    (([1, 0], [[0.5, 0.5]], [[0.5, 0.5]] * 3), "draft_probs must be a \\(2, V\\)"),
    (([1], [[0.6, 0.6]], [[0.5, 0.5]] * 2), "draft_probs must sum to 1"),
    (([1], [[0.5, 0.5]], [[0.5, 0.4]] * 2), "target_probs must sum to 1"),
    (([1], [[1.5, -0.5]], [[0.5, 0.5]] * 2), "draft_probs must hold finite probabilities >= 0"),
    (([1], [[0.5, 0.5]], [[0.5, 0.5, 0.0]] * 2), "same vocabulary"),
    (([2], [[0.5, 0.5]], [[0.5, 0.5]] * 2), "draft_tokens must be ids in \\[0, 2\\)"),
    (([0.5], [[0.5, 0.5]], [[0.5, 0.5]] * 2), "draft_tokens must be a 1-D sequence"),
    (([0], [[0.0, 1.0]], [[0.5, 0.5]] * 2), "draft_tokens\\[0\\] = 0 has draft probability 0"),
])
def test_verify_names_the_bad_argument(args, match):
    with pytest.raises(ValueError, match=match):
        verify(*args, np.random.default_rng(0))


@pytest.mark.parametrize("call, match", [
    (lambda: expected_accepted(1.2, 3), "alpha must be a probability"),
    (lambda: expected_accepted(-0.1, 3), "alpha must be a number >= 0"),
    (lambda: expected_accepted(0.5, -1), "k must be an integer >= 0"),
    (lambda: expected_accepted(0.5, 2.0), "k must be an integer >= 0"),
    (lambda: speedup(0.5, 2, -1), "cost_ratio must be a number >= 0"),
    (lambda: acceptance_rate([0.5, 0.5], [1.0]), "same shape"),
    (lambda: acceptance_rate([[0.5, 0.5]], [[0.5, 0.5]]), "target_probs must be a 1-D probability vector"),
    (lambda: goodness_of_fit([1, 2], [0.2, 0.3, 0.5]), "counts must be 3 counts"),
    (lambda: chi_square_sf(1.0, 0), "df must be an integer >= 1"),
    (lambda: chi_square_sf(-1.0, 2), "x must be a number >= 0"),
    (lambda: speculative.speculative_generate(TARGET, TARGET, PROMPT, 0, 2), "n must be an integer >= 1"),
    (lambda: speculative.speculative_generate(TARGET, TARGET, PROMPT, 5, 2, temperature=-1), "temperature"),
    (lambda: speculative.speculative_generate(TARGET, TARGET, PROMPT, 1020, 4), "exceeds the models' max_seq_len"),
    (lambda: speculative.perturbed(TARGET, -0.1), "noise must be a number >= 0"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_generate_needs_models_with_one_vocabulary():
    with pytest.raises(TypeError, match="target and draft must be"):
        speculative.speculative_generate(TARGET, "draft", PROMPT, 5, 2)
    other = model.Transformer(model.ModelConfig("other", 128, 32, 1, 2, 1, 64, 256))
    with pytest.raises(ValueError, match="share a vocabulary"):
        speculative.speculative_generate(TARGET, other, PROMPT, 5, 2)
