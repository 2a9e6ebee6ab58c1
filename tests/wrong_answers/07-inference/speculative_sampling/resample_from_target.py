"""Draws the replacement of a rejected draft from the target's p instead of the residual max(0, p - q)."""

import numpy as np

FAILS = ["first_token", "later_positions", "generated_text"]


def verify(draft_tokens, draft_probs, target_probs, rng):
    p, q = np.asarray(target_probs, dtype=float), np.asarray(draft_probs, dtype=float)
    accepted = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            accepted.append(int(x))
            continue
        accepted.append(int(rng.choice(len(p[i]), p=p[i] / p[i].sum())))
        return accepted
    bonus = p[len(draft_tokens)]
    return accepted + [int(rng.choice(len(bonus), p=bonus / bonus.sum()))]
