"""Lists a 128 x 256 x 128 tile with 3 stages: 3 x (128 + 256) x 128 x 2 bytes = 288 KiB of shared memory, more than
the 227 KiB an H100 gives a thread block (the kernel is right in the interpreter, which has no such limit)."""

FAILS = ["gpu_configs"]


def gpu_configs():
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8},  # noqa: F821
                      num_stages=3, num_warps=8),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},  # noqa: F821
                      num_stages=4, num_warps=4),
    ]
