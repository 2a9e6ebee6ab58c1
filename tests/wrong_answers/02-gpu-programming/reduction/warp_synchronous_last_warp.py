"""Adds the last 32 values in shared memory with no barrier, trusting the warp to run in lockstep: a race since Volta."""

FAILS = ["block_sums_shuffle", "block_sums_shuffle_warp", "reduce_sum", "reduce_sum_profile"]


@cuda.jit(device=True)  # noqa: F821
def store_block_sum(sdata, out, index):
    tid = cuda.threadIdx.x  # noqa: F821
    s = BLOCK // 2  # noqa: F821
    while s >= WARP:  # noqa: F821
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()  # noqa: F821
        s //= 2
    if tid < 16:
        sdata[tid] += sdata[tid + 16]
        sdata[tid] += sdata[tid + 8]
        sdata[tid] += sdata[tid + 4]
        sdata[tid] += sdata[tid + 2]
        sdata[tid] += sdata[tid + 1]
    if tid == 0:
        out[index] = sdata[0]
