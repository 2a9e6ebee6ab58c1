"""Speculative sampling: a draft proposes k tokens, one target pass checks them, the output follows the target exactly.

Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML
2023) and Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling"
(DeepMind 2023) found the same rule. Draft token x, proposed with draft probability q(x), is kept
with probability min(1, p(x) / q(x)), p being the target's probability; at the first rejection the
target's token is drawn from the residual norm(max(0, p - q)); when all k are kept, the target's
pass has already computed the distribution of the token after them, and one more token (the
bonus) is drawn from it. Every token then follows p, whatever q is: q only decides how many
tokens one pass of the target yields.

Exactness is a statement about distributions, so it is tested statistically: `goodness_of_fit`
is Pearson's chi-square test, with an exact tail (`chi_square_sf`) so that no scipy is needed.
"""

import copy
import math

import numpy as np

from .._validate import nonnegative_int, nonnegative_number, positive_int
from .model import Transformer, token_probabilities

PROBABILITY_SLACK = 1e-4  # how far from 1 a row of probabilities may sum (float32 softmax over 128k tokens)


# ------------------------------------------------------------------------------------------- the rule

def verify(draft_tokens, draft_probs, target_probs, rng: np.random.Generator) -> list[int]:
    """The tokens one target pass yields: the accepted prefix of the drafts, then one token of the target's.

    draft_tokens: k token ids the draft proposed; draft_probs (k, V): row i is the distribution
    draft token i was sampled from; target_probs (k + 1, V): row i is the target's distribution
    at the same position, row k the one after the last draft. Returns 1 to k + 1 tokens.
    """
    drafts, q, p = check_verify(draft_tokens, draft_probs, target_probs)
    accepted = []
    for i, x in enumerate(drafts):
        # accept with probability min(1, p/q); multiplying avoids dividing, and p >= q always accepts
        if rng.random() * q[i, x] < p[i, x]:
            accepted.append(x)
            continue
        # Rejection needs p(x) < q(x). Both rows sum to 1, so some other token has p > q, and
        # sum(max(0, p - q)) = sum(max(0, q - p)) >= q(x) - p(x) > 0: the residual is never empty.
        # In floating point it can round to 0 when p and q agree to the last bit; then p is the residual.
        residual = np.maximum(p[i] - q[i], 0.0)
        accepted.append(sample(residual if residual.sum() > 0 else p[i], rng))
        return accepted
    accepted.append(sample(p[len(drafts)], rng))  # the bonus token: all k accepted
    return accepted


def sample(weights, rng: np.random.Generator) -> int:
    """A token drawn with probability proportional to `weights` (inverse CDF: one uniform, as fast as it gets)."""
    cumulative = np.cumsum(weights)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))


def acceptance_rate(target_probs, draft_probs) -> float:
    """alpha = sum_x min(p(x), q(x)): the probability that a draft token drawn from q is accepted.

    It is 1 - the total variation distance between p and q; 1 when they are equal.
    """
    p = check_distribution("target_probs", target_probs)
    q = check_distribution("draft_probs", draft_probs)
    if p.shape != q.shape:
        raise ValueError(f"target_probs and draft_probs must have the same shape, got {p.shape} and {q.shape}")
    return float(np.minimum(p, q).sum())


def expected_accepted(alpha: float, k: int) -> float:
    """Expected tokens one target pass yields with k drafts: (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al., eq. 1).

    Draft i is reached and kept with probability alpha^(i+1) (acceptances independent, each alpha),
    and the pass always adds one token of its own, so the mean is 1 + alpha + ... + alpha^k,
    summed here term by term: exact at alpha = 1 (k + 1 tokens), where the closed form is 0/0.
    """
    alpha = _probability("alpha", alpha)
    k = nonnegative_int("k", k)
    return float(sum(alpha**i for i in range(k + 1)))


def speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Expected wall-time speed-up over plain decoding (Leviathan et al., Theorem 3.8).

    One round costs k draft steps and one target pass, k * c + 1 in units of a target step
    (cost_ratio c = draft step / target step, the verify pass counted as one target step), and
    yields expected_accepted(alpha, k) tokens, each of which would have cost one target step.
    """
    cost_ratio = nonnegative_number("cost_ratio", cost_ratio)
    return expected_accepted(alpha, k) / (k * cost_ratio + 1)


# --------------------------------------------------------------------------------- a real model's run

def speculative_generate(target: Transformer, draft: Transformer, prompt, n: int, k: int, *,
                         temperature: float = 1.0, seed: int = 0) -> dict:
    """Generate n tokens after `prompt` with speculative sampling: k drafts per pass of the target.

    Both models sample at `temperature` (0: greedy, the distributions become one-hot). No KV
    cache: each call recomputes its sequence, which changes the time, not the tokens. Returns
    "tokens" (the n new ids), "target_calls", "draft_calls", "accepted" (the drafts kept in each
    target call) and "acceptance_rate", kept drafts over the drafts the target judged (those after
    a rejection are never judged), which estimates the mean alpha along the text.
    """
    if not (isinstance(target, Transformer) and isinstance(draft, Transformer)):
        raise TypeError("target and draft must be aisys.inference.model.Transformer models")
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"target and draft must share a vocabulary, got V={target.config.vocab_size} "
                         f"and V={draft.config.vocab_size}")
    n, k = positive_int("n", n), nonnegative_int("k", k)
    temperature = nonnegative_number("temperature", temperature)
    tokens = [int(t) for t in target.check_tokens(prompt)]
    if len(tokens) + n + k > min(target.config.max_seq_len, draft.config.max_seq_len):
        raise ValueError(f"prompt ({len(tokens)} tokens) + n ({n}) + k ({k}) exceeds the models' max_seq_len")
    rng = np.random.default_rng(seed)
    start, target_calls, draft_calls, accepted = len(tokens), 0, 0, []
    while len(tokens) - start < n:
        drafts, draft_probs = [], []
        for _ in range(k):
            q = next_token_probs(draft, tokens + drafts, 1, temperature)[0]
            drafts.append(sample(q, rng))
            draft_probs.append(q)
        draft_calls += k
        target_probs = next_token_probs(target, tokens + drafts, k + 1, temperature)  # one pass scores them all
        target_calls += 1
        new = verify(drafts, np.reshape(draft_probs, (k, -1)), target_probs, rng)
        accepted.append(len(new) - 1)  # every token but the last is a kept draft
        tokens += new
    judged = sum(accepted) + sum(a < k for a in accepted)  # each call judges its kept drafts and one rejected
    return {"tokens": tokens[start:start + n], "target_calls": target_calls, "draft_calls": draft_calls,
            "accepted": accepted, "acceptance_rate": sum(accepted) / judged if judged else 1.0}


def next_token_probs(model: Transformer, tokens: list[int], last: int, temperature: float) -> np.ndarray:
    """(last, V) next-token distributions at the last `last` positions of `tokens`, at `temperature`."""
    return token_probabilities(model.forward(tokens)[-last:], temperature)


def perturbed(model: Transformer, noise: float, *, seed: int = 1) -> Transformer:
    """A copy of `model` whose every weight matrix has Gaussian noise of `noise` times its own spread added.

    A stand-in for a draft model that agrees with the target often but not always, as a distilled
    or quantised copy does: noise 0 is the target itself (acceptance rate 1).
    """
    noise = nonnegative_number("noise", noise)
    rng = np.random.default_rng(seed)
    draft = copy.deepcopy(model)

    def jitter(w):  # matrices only: the norms' gains stay as they are
        return (w + noise * w.std() * rng.standard_normal(w.shape)).astype(w.dtype) if w.ndim == 2 else w

    draft.embedding, draft.lm_head = jitter(draft.embedding), jitter(draft.lm_head)
    for layer in draft.layers:
        for name, value in vars(layer).items():
            setattr(layer, name, jitter(value))
    return draft


# ------------------------------------------------------------------------------ testing exactness

def goodness_of_fit(counts, probs, *, min_expected: float = 20.0) -> float:
    """Pearson's chi-square p-value of observed `counts` against the distribution `probs`.

    A tiny p-value says the counts were not drawn from probs. A count where probs is 0 is
    impossible, so it gives 0. Cells expecting fewer than `min_expected` draws are pooled into
    one, where the chi-square approximation of the statistic's law holds.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = check_distribution("probs", probs)
    if counts.shape != probs.shape or (counts < 0).any():
        raise ValueError(f"counts must be {probs.shape[0]} counts >= 0, one per probability, got shape {counts.shape}")
    if (counts[probs == 0] > 0).any():
        return 0.0
    expected = counts.sum() * probs
    small = (expected < min_expected) & (probs > 0)
    observed = np.append(counts[expected >= min_expected], counts[small].sum())
    expected = np.append(expected[expected >= min_expected], expected[small].sum())
    observed, expected = observed[expected > 0], expected[expected > 0]
    if len(expected) < 2:
        return 1.0  # one cell: nothing can differ
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return chi_square_sf(statistic, len(expected) - 1)


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with df degrees of freedom: the regularised upper gamma Q(df/2, x/2), exactly.

    For integer df it has closed forms: e^{-y} sum_{i<m} y^i / i! when df = 2m, and
    erfc(sqrt(y)) + e^{-y} sum_{i=1..m} y^{i-1/2} / Gamma(i + 1/2) when df = 2m + 1, with y = x/2.
    """
    df = positive_int("df", df)
    x = nonnegative_number("x", x)
    y = x / 2
    if y == 0:
        return 1.0
    if df % 2 == 0:
        terms = [math.exp(-y + i * math.log(y) - math.lgamma(i + 1)) for i in range(df // 2)]
        return min(1.0, math.fsum(terms))
    terms = [math.exp(-y + (i - 0.5) * math.log(y) - math.lgamma(i + 0.5)) for i in range(1, df // 2 + 1)]
    return min(1.0, math.erfc(math.sqrt(y)) + math.fsum(terms))


# ------------------------------------------------------------------------------------- validation

def check_verify(draft_tokens, draft_probs, target_probs) -> tuple[list[int], np.ndarray, np.ndarray]:
    """verify's arguments as (drafts, q (k, V), p (k + 1, V)) in float64, or an error naming the one that is wrong."""
    tokens = np.asarray(draft_tokens)
    if tokens.ndim != 1 or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
        raise ValueError(f"draft_tokens must be a 1-D sequence of k integer token ids, got {draft_tokens!r:.80}")
    k = tokens.size
    q = check_distribution("draft_probs", draft_probs, rows=k)
    p = check_distribution("target_probs", target_probs, rows=k + 1)
    if k and q.shape[1] != p.shape[1]:
        raise ValueError("draft_probs and target_probs must cover the same vocabulary, "
                         f"got V={q.shape[1]} and V={p.shape[1]}")
    if k and (tokens.min() < 0 or tokens.max() >= p.shape[1]):
        raise ValueError(f"draft_tokens must be ids in [0, {p.shape[1]}), got {tokens.tolist()!r:.80}")
    drafts = [int(t) for t in tokens]
    for i, x in enumerate(drafts):
        if q[i, x] == 0:
            raise ValueError(f"draft_tokens[{i}] = {x} has draft probability 0: it cannot have been sampled "
                             f"from draft_probs[{i}]")
    return drafts, q, p


def check_distribution(name: str, probs, rows: int | None = None) -> np.ndarray:
    """`probs` as float64 distributions (a vector, or `rows` rows), each >= 0 and summing to 1, renormalised."""
    array = np.asarray(probs, dtype=np.float64) if not isinstance(probs, str) else np.asarray([])
    want = "a 1-D probability vector" if rows is None else f"a ({rows}, V) array of probability rows"
    if (rows is None and array.ndim != 1) or (rows is not None and (array.ndim != 2 or array.shape[0] != rows)) \
            or array.shape[-1] == 0:
        raise ValueError(f"{name} must be {want}, got shape {array.shape}")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError(f"{name} must hold finite probabilities >= 0")
    sums = array.sum(axis=-1)
    if (np.abs(sums - 1) > PROBABILITY_SLACK).any():
        raise ValueError(f"{name} must sum to 1 (per row), got sums {np.round(np.atleast_1d(sums), 6).tolist()!r:.80}")
    return array / sums[..., None] if array.ndim == 2 else array / sums


def _probability(name: str, value) -> float:
    value = nonnegative_number(name, value)
    if value > 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return value
