"""Ignores GROUP_M and numbers the tiles row by row: the product is right, but the programs in flight need every
column panel of B."""

FAILS = ["program_order"]


@triton.jit  # noqa: F821
def tile_of(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):  # noqa: F821
    return pid // tiles_n, pid % tiles_n
