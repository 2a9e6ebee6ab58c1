# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: matrix-vector products: which one coalesces
#
# **You will learn** to answer an interview favourite from the launch report rather than from memory: for
# a row-major matrix `A` and one thread per output, which of `A x` and `x A` reads `A` coalesced, and why.
# A warp's loads are *coalesced* when its 32 lanes read neighbouring addresses, so that the hardware moves
# a few 32-byte sectors for the whole warp instead of one per lane.
#
# **The conventions, all of them:**
# - `a` is a C-contiguous (row-major) `float32` matrix of shape `(M, K)`, `M, K >= 1` and not multiples of
#   32 in general: element `(m, k)` lies at offset `m * K + k`, so a row is contiguous. Read it as given:
#   no transposed copy on the host.
# - `gemv(a, x)`: `x` a `float32` vector of `K` elements; returns `y = a @ x`, a `float32` vector of `M`.
# - `gemv_t(a, x)`: `x` a `float32` vector of `M` elements; returns `y = x @ a` (that is `a.T @ x`), a
#   `float32` vector of `K`.
# - Each is **one launch** of **one thread per output**: `THREADS = 128` threads per block (fixed below),
#   `ceil(outputs / THREADS)` blocks, and the thread of global index `i = cuda.grid(1)` computes output `i`
#   (nothing where `i >= outputs`), adding its terms one after another in a `float32` register:
#   `gemv`'s thread `m` walks row `m`, `gemv_t`'s thread `k` walks column `k`.
# - **Global memory only**: no shared memory, no atomics.
# - Results are compared with the product in float64 within a relative tolerance of `1e-5` and an absolute
#   one of `1e-5` times the largest `sum(|a[m, k] * x[k]|)` over the outputs.
# - **What the launch reports must show** (the checks run both functions on one 64 x 96 matrix and compare
#   with the reference's reports): each function one launch of one thread per output with no shared
#   memory, and **`gemv_t`'s loads coalesced**, global efficiency (sectors the data needs / sectors moved)
#   as high as the reference's. Print both reports below and read the `global load` line of `a`: in
#   `gemv`, each warp instruction moves 32 sectors for 32 floats (a lane's float lies `K` floats from its
#   neighbour's); in `gemv_t`, 4 sectors for 32 consecutive floats.
#
# The kernels run in a simulator on the CPU (on a machine with an NVIDIA GPU, `aisys.simt.cuda` is
# numba-cuda); `with simt.profile() as launches:` gives each launch's report. The checks read the
# reports from a run of their own: they take the source of the cells you ran, keep imports, `def`s and
# assignments to names, and run them again in a fresh simulator. Only the kernel dialect runs there
# (arithmetic, indexing, `if`/`for`/`while`, `def` decorated with `@cuda.jit` or `@functools.cache`;
# imports of `numpy`, `math`, `functools` and `aisys.simt`; no `class`, `with`, `global`, no name
# starting with `_`): a definition outside it fails the check that needs it, naming its line.

# %%
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("09-drills/gemv_simt", globals())

THREADS = 128  # threads per block


# %% tags=["solution"]
@cuda.jit
def gemv_kernel(a, x, y):
    """y[m] = sum over k of a[m, k] * x[k]: thread m of the grid computes y[m]."""
    ### BEGIN SOLUTION
    m = cuda.grid(1)
    if m < y.size:
        acc = np.float32(0)
        for k in range(x.size):
            acc += a[m, k] * x[k]  # the lanes of a warp read 32 rows: K floats apart
        y[m] = acc
    ### END SOLUTION


@cuda.jit
def gemv_t_kernel(a, x, y):
    """y[k] = sum over m of x[m] * a[m, k]: thread k of the grid computes y[k]."""
    ### BEGIN SOLUTION
    k = cuda.grid(1)
    if k < y.size:
        acc = np.float32(0)
        for m in range(x.size):
            acc += x[m] * a[m, k]  # the lanes of a warp read 32 consecutive floats of row m
        y[k] = acc
    ### END SOLUTION


def gemv(a, x):
    """y = a @ x, float32, for a row-major (M, K) float32 a: one thread per row."""
    ### BEGIN SOLUTION
    y = np.empty(a.shape[0], np.float32)
    gemv_kernel[math.ceil(y.size / THREADS), THREADS](a, x, y)
    return y
    ### END SOLUTION


def gemv_t(a, x):
    """y = x @ a, float32, for a row-major (M, K) float32 a: one thread per column."""
    ### BEGIN SOLUTION
    y = np.empty(a.shape[1], np.float32)
    gemv_t_kernel[math.ceil(y.size / THREADS), THREADS](a, x, y)
    return y
    ### END SOLUTION


# %% tags=["check"]
check("gemv")
### BEGIN HIDDEN TESTS
check("gemv", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("gemv_t")
### BEGIN HIDDEN TESTS
check("gemv_t", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Both reports on one 64 x 96 matrix. Compare the `sectors(ideal)` column of the two loads of `a`.

# %%
example = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
with simt.profile() as launches:
    gemv(example, np.ones(96, np.float32))
    gemv_t(example, np.ones(64, np.float32))
for report in launches:
    print(report, end="\n\n")

# %% tags=["check"]
check("which_coalesces")
### BEGIN HIDDEN TESTS
check("which_coalesces", hidden=True)
### END HIDDEN TESTS
