"""Interleaved addressing, `if tid % (2 * s) == 0` for s = 1, 2, 4, ...: right sums, but every warp diverges at every level."""

FAILS = ["block_sums_tree_sequential"]


@functools.cache  # noqa: F821
def tree_kernel(dtype):
    @cuda.jit  # noqa: F821
    def block_sums_tree_kernel(x, partial):
        sdata = cuda.shared.array(BLOCK, dtype)  # noqa: F821
        tid = cuda.threadIdx.x  # noqa: F821
        i = cuda.blockIdx.x * BLOCK + tid  # noqa: F821
        if i < x.size:
            sdata[tid] = x[i]
        else:
            sdata[tid] = 0
        cuda.syncthreads()  # noqa: F821
        s = 1
        while s < BLOCK:  # noqa: F821
            if tid % (2 * s) == 0:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()  # noqa: F821
            s *= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]  # noqa: F821

    return block_sums_tree_kernel
