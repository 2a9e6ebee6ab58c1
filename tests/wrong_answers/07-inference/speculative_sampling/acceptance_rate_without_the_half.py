"""Takes alpha = 1 - sum |p - q|, forgetting the 1/2 of the total variation distance."""

import numpy as np

FAILS = ["acceptance_rate"]


def acceptance_rate(target_probs, draft_probs):
    return float(1 - np.abs(np.asarray(target_probs) - np.asarray(draft_probs)).sum())
