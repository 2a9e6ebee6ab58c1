"""Gives every thread one bin, zeroing and flushing `local[threadIdx.x]` without checking threadIdx.x < bins."""

FAILS = ["histogram", "histogram_privatised", "histogram_race_free"]


@cuda.jit  # noqa: F821
def histogram_kernel(values, counts):
    local = cuda.shared.array(BINS_MAX, np.int32)  # noqa: F821
    local[cuda.threadIdx.x] = 0  # noqa: F821  (blocks have BINS_MAX threads)
    cuda.syncthreads()  # noqa: F821
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):  # noqa: F821
        cuda.atomic.add(local, values[i], 1)  # noqa: F821
    cuda.syncthreads()  # noqa: F821
    cuda.atomic.add(counts, cuda.threadIdx.x, local[cuda.threadIdx.x])  # noqa: F821  (past the end when bins < 256)
