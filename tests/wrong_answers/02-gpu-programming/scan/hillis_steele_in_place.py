"""Hillis-Steele in one buffer: a thread overwrites s[i] while the thread at i + stride may still read it."""

FAILS = ["block_scan", "scan", "scan_race_free", "scan_work_efficient"]


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
            cuda.syncthreads()  # noqa: F821
            for k in range(t, SECTION, THREADS):  # noqa: F821
                if k >= stride:
                    s[k] += s[k - stride]  # races with the thread that adds into s[k - stride] at this level
            stride *= 2
        cuda.syncthreads()  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                out[start + k] = s[k]
        if t == 0:
            totals[cuda.blockIdx.x] = s[SECTION - 1]  # noqa: F821

    return block_scan_kernel
