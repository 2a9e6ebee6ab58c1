"""Checks: beam search over a Markov model given as tables of log-probabilities.

Visible cases are two small fixed ones. Hidden cases add the edges an interviewer probes: a greedy trap
(the best sequence starts with the less likely token), eos best at once, eos out of reach (the answer is
open at max_len), max_len 1, a beam wider than every candidate, a tie between sequences of different
lengths, scores near -1200 (where probabilities underflow), a beam of 1 and a random model, then a
property check: models with log-probs from a few powers of two (ties everywhere, sums exact) drawn by
hypothesis, the first failing case shrunk to the smallest.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aisys.interview import decoding
from aisys_grader.checks import check, compare_cases, compare_property
from aisys_grader.compare import assert_close, assert_format

TOLERANCE = (1e-9, 1e-12)
STEPS = (0.0, -0.25, -0.5, -1.0, -2.0, -4.0)  # any sum of these is exact: ties are real ties


def _case(log_probs0, log_probs, beam_width, max_len, eos) -> dict:
    return {"log_probs0": np.array(log_probs0, dtype=np.float64), "log_probs": np.array(log_probs, dtype=np.float64),
            "beam_width": beam_width, "max_len": max_len, "eos": eos}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _random(rng, vocab, beam_width, max_len, eos, spread=1.0) -> dict:
    return _case(_log_softmax(rng.standard_normal(vocab) * spread),
                 _log_softmax(rng.standard_normal((vocab, vocab)) * spread), beam_width, max_len, eos)


@st.composite
def CASES(draw):
    vocab = draw(st.integers(2, 5))
    steps = st.sampled_from(STEPS)
    return {"log_probs0": draw(hnp.arrays(np.float64, (vocab,), elements=steps)),
            "log_probs": draw(hnp.arrays(np.float64, (vocab, vocab), elements=steps)),
            "beam_width": draw(st.integers(1, 4)), "max_len": draw(st.integers(1, 5)),
            "eos": draw(st.integers(0, vocab - 1))}


def _compare(got, expected, case):
    """(tokens int64, exact; score, within the tolerance), each named in a message."""
    if isinstance(got, list) and len(got) == 2:
        assert_format(got[0], "int64", where="tokens")
        assert_close(got[0], expected[0], rtol=0, atol=0, where="tokens")
        assert_close(got[1], expected[1], rtol=TOLERANCE[0], atol=TOLERANCE[1], where="score")
    assert_close(got, expected, rtol=TOLERANCE[0], atol=TOLERANCE[1], where="(tokens, score)")


@check(points=3)
def beam_search(student, rng, hidden):
    """beam_search(log_probs0, log_probs, beam_width, max_len, eos): the best sequence (int64) and its score,
    finished hypotheses set aside, ties to the smaller tuple of tokens."""
    # the greedy trap: 0 is the likelier first token, but 1 is followed by 1 with probability 0.9
    trap = (np.log([0.5, 0.4, 0.1]), np.log([[0.3, 0.3, 0.4], [0.05, 0.9, 0.05], [1 / 3, 1 / 3, 1 / 3]]))
    cases = [_case(*trap, 2, 2, 2), _random(np.random.default_rng(0), 4, 2, 4, 3)]
    if hidden:
        unlikely = -300.0 - rng.integers(0, 8, (3, 3))  # every token about e^-300: three underflow a product
        unlikely[:, 2] = -1000.0  # and eos never chosen: the answer has 4 tokens, a score near -1200
        cases = [_case(*trap, 3, 3, 2),
                 _case([-0.1, -3, -3], np.full((3, 3), -1.0), 2, 4, 0),  # eos first, and best at once
                 _case([-1, -1, -1, -50], np.full((4, 4), -1.0) - 49 * np.eye(4)[3], 2, 3, 3),  # eos out of reach
                 _case([-2, -1, -1], np.zeros((3, 3)), 2, 1, 2),  # max_len 1: a one-token tie, the smaller first
                 _random(rng, 3, 50, 3, 1),  # a beam wider than every candidate: exhaustive
                 _case([-1, -2, -1], [[-5, -5, 0], [-1, -1, -1], [-1, -1, -1]], 2, 2, 2),  # (0, 2) ties (2,)
                 _case(unlikely[0], unlikely, 2, 4, 2),  # scores near -1200
                 _random(rng, 5, 1, 5, 4),  # a beam of 1: greedy is right
                 _random(rng, 8, 4, 8, int(rng.integers(8)), spread=2.0)]
    compare_cases(student, "beam_search", cases, decoding.beam_search, returns="list", hidden=hidden,
                  compare=_compare)
    if hidden:
        compare_property(student, "beam_search", CASES(), decoding.beam_search, rng=rng, returns="list",
                         hidden=hidden, compare=_compare)
