"""Starts at threadIdx.x, forgetting the block's offset: every block does the same elements and some are never written."""

FAILS = ["vector_add", "vector_add_grid_stride", "vector_add_coalesced"]


@cuda.jit  # noqa: F821
def vector_add_kernel(x, y, out):
    for i in range(cuda.threadIdx.x, out.size, cuda.gridsize(1)):  # noqa: F821
        out[i] = x[i] + y[i]
