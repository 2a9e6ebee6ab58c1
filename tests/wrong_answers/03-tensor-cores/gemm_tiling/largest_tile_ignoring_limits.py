"""Picks the highest intensity without checking that the block fits in shared memory and registers."""

FAILS = ["best_tiling"]


def best_tiling(M, N, K, dtype, candidates, smem_limit, regs_limit):
    def rank(tiling):
        intensity = traffic(M, N, K, dtype, tiling)["global_intensity"]  # noqa: F821
        return -intensity, resources(tiling, dtype)["shared_memory"]  # noqa: F821

    return min(candidates, key=rank)
