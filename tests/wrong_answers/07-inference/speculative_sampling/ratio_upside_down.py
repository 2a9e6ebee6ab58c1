"""Keeps a draft with probability min(1, q(x)/p(x)): the ratio upside down, so the draft's favourites get through."""

import numpy as np

FAILS = ["first_token", "accepted_count", "later_positions", "generated_text"]


def verify(draft_tokens, draft_probs, target_probs, rng):
    p, q = np.asarray(target_probs, dtype=float), np.asarray(draft_probs, dtype=float)
    accepted = []
    for i, x in enumerate(draft_tokens):
        with np.errstate(divide="ignore"):
            ratio = q[i, x] / p[i, x]
        if rng.random() < min(1.0, ratio):
            accepted.append(int(x))
            continue
        residual = np.maximum(p[i] - q[i], 0.0)
        accepted.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return accepted
    bonus = p[len(draft_tokens)]
    return accepted + [int(rng.choice(len(bonus), p=bonus / bonus.sum()))]
