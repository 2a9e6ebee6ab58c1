"""Pads to a power of two with zeros: they sort into the middle of the data, and the last real elements are cut off."""

FAILS = ["bitonic_sort_any_length"]


def bitonic_sort(x):
    n = x.size
    size = 1 << max(n - 1, 0).bit_length()
    padded = np.zeros(size, x.dtype)  # noqa: F821
    padded[:n] = x
    d_a = cuda.to_device(padded)  # noqa: F821
    blocks = math.ceil(size / THREADS)  # noqa: F821
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            bitonic_stage_kernel[blocks, THREADS](d_a, j, k)  # noqa: F821
            j //= 2
        k *= 2
    return d_a.copy_to_host()[:n]
