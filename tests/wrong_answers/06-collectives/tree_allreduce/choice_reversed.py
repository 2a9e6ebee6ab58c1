"""Compares the predicted times the wrong way round: picks the slower algorithm."""

FAILS = ["choose_algorithm"]


def choose_algorithm(nbytes, world_size, alpha, beta):
    p = world_size
    log_p = p.bit_length() - 1
    doubling_steps = log_p if p & (p - 1) == 0 else log_p + 2
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    doubling = doubling_steps * (alpha + nbytes * beta)
    return "recursive_doubling" if doubling > ring else "ring"
