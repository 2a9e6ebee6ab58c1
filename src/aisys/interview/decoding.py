"""Choosing tokens from a model's scores, as interviews pose it: top-k, nucleus (top-p) sampling made deterministic,
and beam search over a model given as plain data. Every tie is broken by a stated rule, never left to a sort."""

import math

import numpy as np

from .._validate import nonnegative_int, positive_int
from ..inference.attention import softmax


def _floats(name: str, value, ndim: int | None = None) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind != "f" or np.isnan(array).any() or (ndim is not None and array.ndim != ndim) or array.ndim < 1:
        shape = f"{ndim}-D" if ndim is not None else "at least 1-D"
        raise ValueError(f"{name} must be a {shape} float array without NaN, got {array.dtype} of shape {array.shape}")
    return array


def _probability(name: str, value, low_open: bool, high_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (
            (0 < value if low_open else 0 <= value) and (value < 1 if high_open else value <= 1)):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def top_k(x, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest values along the last axis of x and their indices (int64), largest first; equal values in
    order of index. k > n gives all n; k = 0 gives arrays whose last axis is empty. Values keep x's dtype."""
    x, k = _floats("x", x), nonnegative_int("k", k)
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]  # stable: equal values keep the order of their index
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int64)


def top_p(logits, temperature: float, p: float, u: float) -> int:
    """Nucleus sampling (Holtzman et al. 2020) with the uniform draw u given, so that it is a function.

    temperature 0 is greedy: the first index of the largest logit. Otherwise probabilities softmax(logits /
    temperature) in float64, sorted largest first (equal ones in order of index); keep the shortest prefix whose
    cumulative sum reaches p (>= p: the token that crosses p is kept; all V if rounding keeps the sum below p),
    renormalise it, and return the first kept token whose renormalised cumulative sum exceeds u (the last kept
    token if rounding keeps every sum at or below u).
    """
    logits = _floats("logits", logits, ndim=1)
    if not np.isfinite(logits).all():
        raise ValueError("logits must be finite")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    p, u = _probability("p", p, low_open=True, high_open=False), _probability("u", u, low_open=False, high_open=True)
    if temperature == 0:
        return int(np.argmax(logits))
    probs = softmax(logits.astype(np.float64) / temperature)
    order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    kept = min(int(np.searchsorted(cumulative, p, side="left")) + 1, len(order))  # the first sum >= p, included
    renormalised = np.cumsum(probs[order[:kept]] / cumulative[kept - 1])
    return int(order[min(int(np.searchsorted(renormalised, u, side="right")), kept - 1)])  # the first sum > u


def beam_search(log_probs0, log_probs, beam_width: int, max_len: int, eos: int) -> tuple[np.ndarray, float]:
    """Beam search over a Markov model: log_probs0 (V,) scores the first token, log_probs[a, b] (V, V) token b
    after token a. Returns the best sequence (int64, eos included if it ends there) and its score.

    A hypothesis's score is the sum of its tokens' log-probs, added in order in float64; no length penalty.
    Hypotheses rank by score, higher first, then by their tokens as Python compares tuples (smaller first).
    Each step keeps the best `beam_width` of the candidates; those ending in eos are finished and set aside
    (never extended: the beam narrows), the rest are extended by every token. The search stops when no
    hypothesis is left to extend or the hypotheses reach max_len tokens; the answer is the best of the
    finished ones and those left at max_len.
    """
    log_probs0, log_probs = _floats("log_probs0", log_probs0, ndim=1), _floats("log_probs", log_probs, ndim=2)
    vocab = len(log_probs0)
    if log_probs.shape != (vocab, vocab) or not (np.isfinite(log_probs0).all() and np.isfinite(log_probs).all()):
        raise ValueError(f"log_probs must be a finite ({vocab}, {vocab}) array and log_probs0 finite, "
                         f"got log_probs of shape {log_probs.shape}")
    beam_width, max_len = positive_int("beam_width", beam_width), positive_int("max_len", max_len)
    if isinstance(eos, bool) or not isinstance(eos, (int, np.integer)) or not 0 <= eos < vocab:
        raise ValueError(f"eos must be a token id in [0, {vocab}), got {eos!r}")

    def best(hypotheses, n):
        return sorted(hypotheses, key=lambda h: (-h[1], h[0]))[:n]

    candidates = [((token,), float(log_probs0[token])) for token in range(vocab)]
    finished = []
    for length in range(1, max_len + 1):
        top = best(candidates, beam_width)
        finished += [h for h in top if h[0][-1] == eos]
        live = [h for h in top if h[0][-1] != eos]
        if not live or length == max_len:
            break
        candidates = [(tokens + (token,), score + float(log_probs[tokens[-1], token]))
                      for tokens, score in live for token in range(vocab)]
    tokens, score = best(finished + live, 1)[0]
    return np.array(tokens, dtype=np.int64), score
