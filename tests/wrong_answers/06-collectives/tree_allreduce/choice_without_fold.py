"""Counts ceil(log2 p) steps for recursive doubling at every p, forgetting the fold's two extra steps."""

import math

FAILS = ["choose_algorithm"]


def choose_algorithm(nbytes, world_size, alpha, beta):
    p = world_size
    steps = math.ceil(math.log2(p))
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    doubling = steps * (alpha + nbytes * beta)
    return "recursive_doubling" if doubling < ring else "ring"
