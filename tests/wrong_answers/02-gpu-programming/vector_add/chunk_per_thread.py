"""Gives each thread a contiguous chunk: right sums, but the lanes of a warp are a chunk apart, each in its own sector."""

FAILS = ["vector_add_coalesced"]


@cuda.jit  # noqa: F821
def vector_add_kernel(x, y, out):
    chunk = (out.size + cuda.gridsize(1) - 1) // cuda.gridsize(1)  # noqa: F821
    start = cuda.grid(1) * chunk  # noqa: F821
    for i in range(start, min(start + chunk, out.size)):
        out[i] = x[i] + y[i]
