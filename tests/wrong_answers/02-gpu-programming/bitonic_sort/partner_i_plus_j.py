"""Pairs i with i + j instead of i ^ j: the last j threads reach past the end of the array."""

FAILS = ["bitonic_sort_power_of_two", "bitonic_sort_any_length", "bitonic_sort_launches"]


@cuda.jit  # noqa: F821
def bitonic_stage_kernel(a, j, k):
    i = cuda.grid(1)  # noqa: F821
    if i < a.size:
        partner = i + j
        if partner > i:
            ascending = (i & k) == 0
            if (a[i] > a[partner]) == ascending:
                a[i], a[partner] = a[partner], a[i]
