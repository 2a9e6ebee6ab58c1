"""Breaks ties in intensity by the order of the list alone, not by the shared memory each candidate needs."""

FAILS = ["best_tiling"]


def best_tiling(M, N, K, dtype, candidates, smem_limit, regs_limit):
    def fits(tiling):
        used = resources(tiling, dtype)  # noqa: F821
        return used["shared_memory"] <= smem_limit and used["accumulator_registers"] <= regs_limit

    fitting = [tiling for tiling in candidates if fits(tiling)]
    return max(fitting, key=lambda t: traffic(M, N, K, dtype, t)["global_intensity"]) if fitting else None  # noqa: F821
