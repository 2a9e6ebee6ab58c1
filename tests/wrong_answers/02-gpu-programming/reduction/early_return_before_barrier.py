"""Returns early from threads past the end of x: in a ragged last block they skip the barriers and leave their shared words unset."""

FAILS = ["block_sums_tree", "block_sums_tree_sequential", "block_sums_tree_race_free"]


@functools.cache  # noqa: F821
def tree_kernel(dtype):
    @cuda.jit  # noqa: F821
    def block_sums_tree_kernel(x, partial):
        sdata = cuda.shared.array(BLOCK, dtype)  # noqa: F821
        tid = cuda.threadIdx.x  # noqa: F821
        i = cuda.blockIdx.x * BLOCK + tid  # noqa: F821
        if i >= x.size:
            return
        sdata[tid] = x[i]
        cuda.syncthreads()  # noqa: F821
        s = BLOCK // 2  # noqa: F821
        while s > 0:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()  # noqa: F821
            s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]  # noqa: F821

    return block_sums_tree_kernel
