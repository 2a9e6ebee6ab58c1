"""Blelloch's scan as in GPU Gems 3: work-efficient and race-free, but exclusive, one place off np.cumsum."""

FAILS = ["block_scan", "scan"]


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
        offset = 1
        d = SECTION // 2  # noqa: F821
        while d > 0:  # up-sweep
            cuda.syncthreads()  # noqa: F821
            if t < d:
                ai = offset * (2 * t + 1) - 1
                bi = offset * (2 * t + 2) - 1
                s[bi] += s[ai]
            offset *= 2
            d //= 2
        cuda.syncthreads()  # noqa: F821
        if t == 0:
            totals[cuda.blockIdx.x] = s[SECTION - 1]  # noqa: F821
            s[SECTION - 1] = 0  # noqa: F821
        d = 1
        while d < SECTION:  # noqa: F821  (down-sweep)
            offset //= 2
            cuda.syncthreads()  # noqa: F821
            if t < d:
                ai = offset * (2 * t + 1) - 1
                bi = offset * (2 * t + 2) - 1
                v = s[ai]
                s[ai] = s[bi]
                s[bi] += v
            d *= 2
        cuda.syncthreads()  # noqa: F821
        for k in range(t, SECTION, THREADS):  # noqa: F821
            if start + k < x.size:
                out[start + k] = s[k]  # exclusive: x[start + k] itself is missing

    return block_scan_kernel
