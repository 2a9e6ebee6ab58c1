"""Drops cuda.syncthreads() between the levels of the up-sweep: a level reads sums another thread has not added yet."""

FAILS = ["block_scan", "scan", "scan_race_free"]


@functools.cache  # noqa: F821
def make_block_scan_kernel(dtype):
    @cuda.jit  # noqa: F821
    def block_scan_kernel(x, out, totals):
        s = cuda.shared.array(SECTION, dtype)  # noqa: F821
        t = cuda.threadIdx.x  # noqa: F821
        start = cuda.blockIdx.x * SECTION  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                s[k] = x[start + k]
            else:
                s[k] = 0
        stride = 1
        while stride < SECTION:  # noqa: F821
            k = (t + 1) * 2 * stride - 1
            if k < SECTION:  # noqa: F821
                s[k] += s[k - stride]
            stride *= 2
        stride = SECTION // 4  # noqa: F821
        while stride > 0:
            cuda.syncthreads()  # noqa: F821
            k = (t + 1) * 2 * stride - 1
            if k + stride < SECTION:  # noqa: F821
                s[k + stride] += s[k]
            stride //= 2
        cuda.syncthreads()  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                out[start + k] = s[k]
        if t == 0:
            totals[cuda.blockIdx.x] = s[SECTION - 1]  # noqa: F821

    return block_scan_kernel
