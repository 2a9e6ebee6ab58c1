"""Prefills the prompt one token at a time: right logits, but T small GEMVs instead of one compute-bound GEMM."""

import numpy as np

FAILS = ["uses_the_cache"]

_prefill_in_one_pass = prefill  # noqa: F821 (the solution's)


def prefill(net, cache, tokens):
    return np.concatenate([_prefill_in_one_pass(net, cache, [t]) for t in tokens])
