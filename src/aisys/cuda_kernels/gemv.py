"""Matrix-vector products with one thread per output: which of A x and x A reads a row-major A coalesced.

For a row-major A (M x K: element (m, k) at offset m * K + k), with thread i
computing output i and stepping through the sum one term at a time:

- `gemv`, y = A x (M outputs): thread m reads row m, a[m, k] for k = 0, 1, ...
  At each step the 32 lanes of a warp read a[m .. m+31, k]: 32 elements K
  floats apart, one 32-byte sector each, of which 4 bytes are used. The loads
  of A are uncoalesced (1/8 of the bytes moved are used, for K >= 8).
- `gemv_t`, y = x A = A^T x (K outputs): thread k reads column k, a[m, k] for
  m = 0, 1, ... At each step a warp reads a[m, k .. k+31]: 32 consecutive
  floats, 4 sectors. Coalesced.

Both read x[k] (or x[m]) the same in every lane: one sector, a broadcast.
Thread i reading "its own row" feels natural and is the slow one; the fix for
A x is not one thread per output but one warp per row (lanes stride through
the row together and combine with shuffles), or tiles staged through shared
memory.
"""

import math

import numpy as np

from aisys.simt import cuda

THREADS = 128  # threads per block


@cuda.jit
def gemv_kernel(a, x, y):
    """y[m] = sum over k of a[m, k] * x[k], thread m of the grid computing y[m]."""
    m = cuda.grid(1)
    if m < y.size:
        acc = np.float32(0)
        for k in range(x.size):
            acc += a[m, k] * x[k]  # a warp reads a column of A: 32 rows, 32 sectors
        y[m] = acc


@cuda.jit
def gemv_t_kernel(a, x, y):
    """y[k] = sum over m of x[m] * a[m, k], thread k of the grid computing y[k]."""
    k = cuda.grid(1)
    if k < y.size:
        acc = np.float32(0)
        for m in range(x.size):
            acc += x[m] * a[m, k]  # a warp reads 32 consecutive elements of row m
        y[k] = acc


def _operands(a, x, axis: int) -> tuple[np.ndarray, np.ndarray]:
    a, x = np.asarray(a), np.asarray(x)
    if a.ndim != 2 or a.dtype != np.float32 or 0 in a.shape:
        raise ValueError(f"a must be a non-empty 2-D float32 array, got shape {a.shape} of {a.dtype}")
    if x.shape != (a.shape[axis],) or x.dtype != np.float32:
        raise ValueError(f"x must be a float32 vector of {a.shape[axis]} elements (a's axis {axis}), got shape "
                         f"{x.shape} of {x.dtype}")
    return np.ascontiguousarray(a), np.ascontiguousarray(x)


def gemv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y = a @ x (float32, M elements) for a row-major float32 a (M x K): one thread per row, uncoalesced."""
    a, x = _operands(a, x, 1)
    y = np.empty(a.shape[0], np.float32)
    gemv_kernel[math.ceil(y.size / THREADS), THREADS](a, x, y)
    return y


def gemv_t(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y = x @ a (float32, K elements) for a row-major float32 a (M x K): one thread per column, coalesced."""
    a, x = _operands(a, x, 0)
    y = np.empty(a.shape[1], np.float32)
    gemv_t_kernel[math.ceil(y.size / THREADS), THREADS](a, x, y)
    return y
