"""Declares the shared array float32 whatever the data: int64 block sums lose their low bits."""

FAILS = ["block_sums_tree"]


@functools.cache  # noqa: F821
def tree_kernel(dtype):
    @cuda.jit  # noqa: F821
    def block_sums_tree_kernel(x, partial):
        sdata = cuda.shared.array(BLOCK, np.float32)  # noqa: F821
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
            cuda.syncthreads()  # noqa: F821
            s //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = sdata[0]  # noqa: F821

    return block_sums_tree_kernel
