"""Replaces a rejected draft but goes on judging the drafts after it, which were conditioned on the rejected token."""

import numpy as np

FAILS = ["first_token", "accepted_count", "later_positions", "generated_text"]


def verify(draft_tokens, draft_probs, target_probs, rng):
    p, q = np.asarray(target_probs, dtype=float), np.asarray(draft_probs, dtype=float)
    accepted = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            accepted.append(int(x))
        else:
            residual = np.maximum(p[i] - q[i], 0.0)
            accepted.append(int(rng.choice(len(residual), p=residual / residual.sum())))
    bonus = p[len(draft_tokens)]
    return accepted + [int(rng.choice(len(bonus), p=bonus / bonus.sum()))]
