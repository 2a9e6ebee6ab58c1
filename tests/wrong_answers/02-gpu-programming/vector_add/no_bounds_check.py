"""Steps a fixed number of times, ceil(n / grid size), with no bounds check: the last step runs past the end."""

FAILS = ["vector_add", "vector_add_grid_stride", "vector_add_coalesced"]


@cuda.jit  # noqa: F821
def vector_add_kernel(x, y, out):
    stride = cuda.gridsize(1)  # noqa: F821
    for step in range((out.size + stride - 1) // stride):
        i = cuda.grid(1) + step * stride  # noqa: F821
        out[i] = x[i] + y[i]
