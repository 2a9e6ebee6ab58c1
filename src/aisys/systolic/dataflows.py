"""Output- and weight-stationary dataflows on a systolic array: the skewed feed, the steps, cycle counts, tiling.

The reference of the exercise 03-tensor-cores/systolic; `array` is the model these run in, and its
docstring states the conventions. The cycle counts, for one tile that fits the array (m x n outputs
for OS, k x n weights for WS, on an array of R rows), follow the wavefront. In OS, A[i, k] enters
row i in cycle i + k (the skew) and reaches PE(i, j) in cycle i + j + k, where B[k, j] arrives too;
the last product, at PE(m-1, n-1) with k = K-1, is added in cycle K + m + n - 3:

    OS tile:  K + m + n - 2 cycles

In WS the k rows of weights take k cycles to shift in; then A[r, i] enters row i in cycle r + i and
the partial sum of C[r, j] is at PE(i, j) in cycle r + i + j; it reaches the bottom row, R - 1,
in cycle (M - 1) + (R - 1) + (n - 1) for the last one:

    WS tile:  k + M + R + n - 2 cycles

A product larger than the array is cut into tiles run one after another (no overlap): OS cuts C
into tiles of R x C and streams K whole; WS cuts B into tiles of R x C and streams M whole, adding
the partial products of the K-tiles outside the array. On an R x C array with K >= 1 the share of
busy multiply-adds over an OS tile is mnK / (RC (K + m + n - 2)), which is K / (K + R + C - 2)
for a full tile: a long K amortises the fill and drain of the wavefront.
"""

import math

import numpy as np

from .._validate import one_of, positive_int
from .array import DATAFLOWS, run_schedule


def skew(t: int, n: int, length: int) -> np.ndarray:
    """The element of each of n streams that enters the array in cycle t: stream i starts i cycles late.

    Stream i sends element t - i in cycle t while 0 <= t - i < length, and -1 (nothing) otherwise, so that
    A[i, k] and B[k, j], entering i and j cycles late, meet at PE(i, j) in cycle i + j + k.
    """
    k = t - np.arange(n)
    return np.where((k >= 0) & (k < length), k, -1)


def os_step(a, b, acc, left, top):
    """One output-stationary cycle: a moves right, b moves down, each PE adds the product of what arrived."""
    a = np.concatenate([left[:, None], a[:, :-1]], axis=1)
    b = np.concatenate([top[None, :], b[:-1]], axis=0)
    return a, b, acc + a * b


def ws_step(x, psum, w, left):
    """One weight-stationary cycle: x moves right, each partial sum moves down adding x * w, w stays."""
    x = np.concatenate([left[:, None], x[:, :-1]], axis=1)
    above = np.concatenate([np.zeros_like(psum[:1]), psum[:-1]], axis=0)
    return x, above + x * w


STEPS = {"os": os_step, "ws": ws_step}


def _sizes(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> tuple[int, ...]:
    one_of("dataflow", dataflow, DATAFLOWS)
    return tuple(positive_int(name, value) for name, value in
                 (("M", M), ("N", N), ("K", K), ("rows", rows), ("cols", cols)))


def schedule(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> list[dict]:
    """The tiles of C (M x N) = A (M x K) @ B (K x N) on a rows x cols array, in the order they run.

    OS: tiles of rows x cols outputs, K streamed whole. WS: tiles of rows x cols weights (over K and N),
    M streamed whole. The last tile along each dimension is ragged when the size is not a multiple.
    """
    M, N, K, rows, cols = _sizes(M, N, K, rows, cols, dataflow)

    def spans(size: int, step: int) -> list[list[int]]:
        return [[start, min(start + step, size)] for start in range(0, size, step)]

    if dataflow == "os":
        return [{"m": m, "n": n, "k": [0, K]} for m in spans(M, rows) for n in spans(N, cols)]
    return [{"m": [0, M], "n": n, "k": k} for n in spans(N, cols) for k in spans(K, rows)]


def cycles(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> int:
    """Cycles of the tiled product on a rows x cols array, tiles one after another (see the module's docstring).

    Summing the tile formulas over tiles whose sizes add up to M (and N, K) gives closed forms: with
    T_m = ceil(M / rows) tiles along M and so on, OS takes T_m T_n (K - 2) + T_n M + T_m N and WS takes
    T_k T_n (M + rows - 2) + T_n K + T_k N.
    """
    M, N, K, rows, cols = _sizes(M, N, K, rows, cols, dataflow)
    tiles_n = math.ceil(N / cols)
    if dataflow == "os":
        tiles_m = math.ceil(M / rows)
        return tiles_m * tiles_n * (K - 2) + tiles_n * M + tiles_m * N
    tiles_k = math.ceil(K / rows)
    return tiles_k * tiles_n * (M + rows - 2) + tiles_n * K + tiles_k * N


def utilisation(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> np.ndarray:
    """Busy share of the array in every cycle of the tiled product, counted from the wavefront's geometry.

    A PE(i, j) is busy in cycle t of an OS tile when 0 <= t - i - j < K (i < m, j < n); of a WS tile, after
    the k cycles of loading, when 0 <= t - k - i - j < M (i < k, j < n).
    """
    M, N, K, rows, cols = _sizes(M, N, K, rows, cols, dataflow)
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    shares = []
    for tile in schedule(M, N, K, rows, cols, dataflow):
        (m0, m1), (n0, n1), (k0, k1) = tile["m"], tile["n"], tile["k"]
        m, n, k = m1 - m0, n1 - n0, k1 - k0
        if dataflow == "os":
            total, start, used, stream = k + m + n - 2, 0, (i < m) & (j < n), k
        else:
            total, start, used, stream = k + m + rows + n - 2, k, (i < k) & (j < n), m
        for t in range(total):
            wave = t - start - i - j
            shares.append(((wave >= 0) & (wave < stream) & used).mean())
    return np.array(shares)


def matmul(A, B, rows: int, cols: int, dataflow: str) -> tuple[np.ndarray, int]:
    """A @ B computed on a rows x cols array, tile after tile: the product and the cycles the run took."""
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"A and B must be 2-D arrays, got shapes {A.shape} and {B.shape}")
    (M, K), N = A.shape, B.shape[-1]
    tiles = schedule(M, N, K, rows, cols, dataflow)
    done = run_schedule(A, B, rows, cols, dataflow, tiles, step=STEPS[dataflow], skew=skew)
    return done.output, done.cycles
