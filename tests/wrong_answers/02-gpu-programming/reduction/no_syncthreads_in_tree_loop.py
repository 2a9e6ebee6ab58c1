"""Drops the barrier between the levels of the tree: a level reads sums the level before has not written yet."""

FAILS = ["block_sums_tree", "block_sums_tree_sequential", "block_sums_tree_race_free"]


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
        s = BLOCK // 2  # noqa: F821
        while s > 0:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]  # noqa: F821

    return block_sums_tree_kernel
