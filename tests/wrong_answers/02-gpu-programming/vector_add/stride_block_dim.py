"""Strides by blockDim.x instead of the whole grid: every block walks the rest of the array, so elements are added up to four times."""

FAILS = ["vector_add_grid_stride"]


@cuda.jit  # noqa: F821
def vector_add_kernel(x, y, out):
    for i in range(cuda.grid(1), out.size, cuda.blockDim.x):  # noqa: F821
        out[i] = x[i] + y[i]
