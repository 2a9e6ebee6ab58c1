"""Gives each thread of the first pass a contiguous chunk: right, but the lanes of a warp read a chunk apart (uncoalesced)."""

FAILS = ["reduce_sum_profile"]


@functools.cache  # noqa: F821
def sum_kernel(dtype):
    @cuda.jit  # noqa: F821
    def reduce_sum_kernel(x, partial):
        sdata = cuda.shared.array(BLOCK, dtype)  # noqa: F821
        chunk = (x.size + cuda.gridsize(1) - 1) // cuda.gridsize(1)  # noqa: F821
        start = cuda.grid(1) * chunk  # noqa: F821
        acc = dtype(0)
        for i in range(start, min(start + chunk, x.size)):
            acc += x[i]
        sdata[cuda.threadIdx.x] = acc  # noqa: F821
        cuda.syncthreads()  # noqa: F821
        store_block_sum(sdata, partial, cuda.blockIdx.x)  # noqa: F821

    return reduce_sum_kernel
