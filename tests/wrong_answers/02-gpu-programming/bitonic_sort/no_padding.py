"""Runs the next power of two's network on the unpadded array, skipping pairs past its end: no sorting network."""

FAILS = ["bitonic_sort_any_length"]


@cuda.jit  # noqa: F821
def bitonic_stage_kernel(a, j, k):
    i = cuda.grid(1)  # noqa: F821
    partner = i ^ j
    if i < a.size and i < partner < a.size:
        ascending = (i & k) == 0
        if (a[i] > a[partner]) == ascending:
            a[i], a[partner] = a[partner], a[i]


def bitonic_sort(x):
    n = x.size
    size = 1 << max(n - 1, 0).bit_length()
    d_a = cuda.to_device(np.ascontiguousarray(x))  # noqa: F821
    blocks = math.ceil(size / THREADS)  # noqa: F821
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            bitonic_stage_kernel[blocks, THREADS](d_a, j, k)  # noqa: F821
            j //= 2
        k *= 2
    return d_a.copy_to_host()
