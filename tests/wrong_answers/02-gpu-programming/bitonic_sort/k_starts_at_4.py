"""Starts the outer loop at k = 4: the first stage, which orders neighbouring pairs, never runs."""

FAILS = ["bitonic_sort_power_of_two", "bitonic_sort_any_length", "bitonic_sort_launches"]


def bitonic_sort(x):
    n = x.size
    size = 1 << max(n - 1, 0).bit_length()
    padded = np.full(size, np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max, x.dtype)  # noqa: F821
    padded[:n] = x
    d_a = cuda.to_device(padded)  # noqa: F821
    blocks = math.ceil(size / THREADS)  # noqa: F821
    k = 4
    while k <= size:
        j = k // 2
        while j >= 1:
            bitonic_stage_kernel[blocks, THREADS](d_a, j, k)  # noqa: F821
            j //= 2
        k *= 2
    return d_a.copy_to_host()[:n]
