"""Counts into the shared bins with a plain `+=`: threads meeting on a bin can read one old count and lose updates.

On a GPU the counts come out short; in the simulator, whose threads take turns, they come
out right, and only the race check sees the bug, as compute-sanitizer's racecheck would.
"""

FAILS = ["histogram_race_free"]


@cuda.jit  # noqa: F821
def histogram_kernel(values, counts):
    bins = counts.size
    local = cuda.shared.array(BINS_MAX, np.int32)  # noqa: F821
    for b in range(cuda.threadIdx.x, bins, cuda.blockDim.x):  # noqa: F821
        local[b] = 0
    cuda.syncthreads()  # noqa: F821
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):  # noqa: F821
        local[values[i]] += 1
    cuda.syncthreads()  # noqa: F821
    for b in range(cuda.threadIdx.x, bins, cuda.blockDim.x):  # noqa: F821
        if local[b] != 0:
            cuda.atomic.add(counts, b, local[b])  # noqa: F821
