"""Transposes without a tile: reads rows of `a` (coalesced) and writes columns of `out` (32 sectors per warp)."""

FAILS = ["transpose_coalesced"]


@cuda.jit  # noqa: F821
def transpose_kernel(a, out):
    row = cuda.blockIdx.y * 32 + cuda.threadIdx.y  # noqa: F821
    col = cuda.blockIdx.x * 32 + cuda.threadIdx.x  # noqa: F821
    if row < a.shape[0] and col < a.shape[1]:
        out[col, row] = a[row, col]


def transpose(a):
    rows, cols = a.shape
    out = np.empty((cols, rows), a.dtype)  # noqa: F821
    if a.size:
        transpose_kernel[(math.ceil(cols / 32), math.ceil(rows / 32)), (32, 32)](a, out)  # noqa: F821
    return out
