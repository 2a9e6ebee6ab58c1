"""Takes the direction from bit j instead of bit k: the merged runs are not bitonic, so nothing sorts."""

FAILS = ["bitonic_sort_power_of_two", "bitonic_sort_any_length"]


@cuda.jit  # noqa: F821
def bitonic_stage_kernel(a, j, k):
    i = cuda.grid(1)  # noqa: F821
    if i < a.size:
        partner = i ^ j
        if partner > i:
            ascending = (i & j) == 0
            if (a[i] > a[partner]) == ascending:
                a[i], a[partner] = a[partner], a[i]
