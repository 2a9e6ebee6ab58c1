"""Adds every element straight into the global counts: right, but one global atomic per element, all contending."""

FAILS = ["histogram_privatised"]


@cuda.jit  # noqa: F821
def histogram_kernel(values, counts):
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):  # noqa: F821
        cuda.atomic.add(counts, values[i], 1)  # noqa: F821
