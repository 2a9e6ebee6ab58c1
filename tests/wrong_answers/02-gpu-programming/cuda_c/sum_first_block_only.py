"""Forgets the second pass: returns block 0's partial sum, right only when one block covers x (n <= 256)."""

FAILS = ["cuda_sum"]


def cuda_sum(x):
    n = x.size
    if n == 0:
        return 0.0
    kernel = compile_kernel(SUM_SOURCE, "block_sum")  # noqa: F821
    blocks = min(MAX_BLOCKS, -(-n // BLOCK))  # noqa: F821
    partial = cupy.empty(blocks, cupy.float32)  # noqa: F821
    kernel((blocks,), (BLOCK,), (cupy.asarray(x, dtype=cupy.float32), partial, np.int64(n)))  # noqa: F821
    return float(partial.get()[0])
