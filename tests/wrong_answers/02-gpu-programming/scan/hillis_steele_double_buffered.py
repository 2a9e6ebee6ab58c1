"""Hillis-Steele with two buffers: right and race-free, but every element works at every level, n log2 n additions."""

FAILS = ["scan_work_efficient"]


@functools.cache  # noqa: F821
def make_block_scan_kernel(dtype):
    @cuda.jit  # noqa: F821
    def block_scan_kernel(x, out, totals):
        buffers = cuda.shared.array((2, SECTION), dtype)  # noqa: F821
        t = cuda.threadIdx.x  # noqa: F821
        start = cuda.blockIdx.x * SECTION  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                buffers[0, k] = x[start + k]
            else:
                buffers[0, k] = 0
        read = 0
        stride = 1
        while stride < SECTION:  # noqa: F821
            cuda.syncthreads()  # noqa: F821
            for k in range(t, SECTION, THREADS):  # noqa: F821
                value = buffers[read, k]
                if k >= stride:
                    value += buffers[read, k - stride]
                buffers[1 - read, k] = value
            read = 1 - read
            stride *= 2
        cuda.syncthreads()  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                out[start + k] = buffers[read, k]
        if t == 0:
            totals[cuda.blockIdx.x] = buffers[read, SECTION - 1]  # noqa: F821

    return block_scan_kernel
