"""Returns the k drafts alone when all are kept, forgetting the bonus token the target's pass already paid for."""

import numpy as np

FAILS = ["accepted_count", "later_positions"]


def verify(draft_tokens, draft_probs, target_probs, rng):
    p, q = np.asarray(target_probs, dtype=float), np.asarray(draft_probs, dtype=float)
    accepted = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            accepted.append(int(x))
            continue
        residual = np.maximum(p[i] - q[i], 0.0)
        accepted.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return accepted
    return accepted
