"""Takes pid_m and pid_n modulo and divided by GROUP_M even in the last group of rows, which may be shorter: its
programs step past the last row of tiles, and tiles of that group are never computed."""

FAILS = ["program_order", "matmul", "matmul_every_config"]


@triton.jit  # noqa: F821
def tile_of(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):  # noqa: F821
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    pid_m = first_m + (pid % per_group) % GROUP_M
    pid_n = (pid % per_group) // GROUP_M
    return pid_m, pid_n
