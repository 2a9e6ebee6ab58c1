"""Rejects a candidate that uses exactly the limit: a block may use all of it."""

FAILS = ["best_tiling"]


def best_tiling(M, N, K, dtype, candidates, smem_limit, regs_limit):
    def fits(tiling):
        used = resources(tiling, dtype)  # noqa: F821
        return used["shared_memory"] < smem_limit and used["accumulator_registers"] < regs_limit

    def rank(tiling):
        intensity = traffic(M, N, K, dtype, tiling)["global_intensity"]  # noqa: F821
        return -intensity, resources(tiling, dtype)["shared_memory"]  # noqa: F821

    fitting = [tiling for tiling in candidates if fits(tiling)]
    return min(fitting, key=rank) if fitting else None
