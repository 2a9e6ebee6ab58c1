# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: tiled matrix multiply in shared memory
#
# **You will learn** to write the tiled matrix multiply that interviews ask for on a whiteboard: a block
# stages tiles of `A` and `B` in shared memory so that each element is loaded from global memory once per
# tile instead of once per thread that needs it, with the two barriers every step needs and the bounds
# that ragged edges need. Without tiles, every element of `A` is loaded `N` times; with tiles of side
# `TILE`, `ceil(N / TILE)` times (and every element of `B` `ceil(M / TILE)` times instead of `M`).
#
# **The conventions, all of them:**
# - `matmul(a, b)` takes C-contiguous `float32` matrices `a` of shape `(M, K)` and `b` of shape `(K, N)`,
#   `M, K, N >= 1` and not multiples of the tile in general, and returns `c = a @ b`, a `float32` array of
#   shape `(M, N)`.
# - **One launch**: `matmul_kernel[grid, (TILE, TILE)](a, b, c)` with `TILE = 8` (fixed below; 16 or 32
#   on a GPU, 8 keeps the simulator quick) and `grid = (ceil(N / TILE), ceil(M / TILE))`: `x` runs along
#   the columns of `c`, `y` along its rows. Thread `(ty, tx) = (threadIdx.y, threadIdx.x)` of block
#   `(by, bx)` computes `c[by * TILE + ty, bx * TILE + tx]`, if that element exists.
# - The block steps through `K` by `TILE`. At each step every thread loads **one** element of a
#   `TILE x TILE` tile of `a` (`a[row, start + tx]`) and one of `b` (`b[start + ty, col]`) into two
#   `cuda.shared.array((TILE, TILE), np.float32)`, storing `0` where the element lies outside the matrix;
#   then `cuda.syncthreads()`; then it adds `tile_a[ty, k] * tile_b[k, tx]` for `k < TILE` into a `float32`
#   register; then `cuda.syncthreads()` again, before the next step overwrites the tiles. Every thread
#   takes part in every barrier, in or out of the matrices: the bounds checks go around the loads and the
#   final store, never around a barrier.
# - Results are compared with the float64 product within a relative tolerance of `1e-5` and an absolute
#   one of `1e-5` times the largest `sum(|a[i, k] * b[k, j]|)`.
# - **What the launch report must show** (the checks compare with the reference kernel on the same
#   input): no race and no barrier error, on ragged shapes too; and about as few global load instructions
#   as the reference's on a 16 x 32 times 32 x 32 product, at most 1.25 times as many: each element of
#   `a` loaded `ceil(N / TILE) = 4` times, not `N = 32` times.
#
# The kernel runs in a simulator on the CPU (on a machine with an NVIDIA GPU, `aisys.simt.cuda` is
# numba-cuda); `with simt.profile() as launches:` gives each launch's report. The checks read the
# report from a run of their own: they take the source of the cells you ran, keep imports, `def`s and
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

check = checker("09-drills/matmul_tiled_simt", globals())

TILE = 8  # a block is TILE x TILE threads, and owns a TILE x TILE tile of c


# %% tags=["solution"]
@cuda.jit
def matmul_kernel(a, b, c):
    """c[row, col] = sum over k of a[row, k] * b[k, col], one TILE x TILE tile of c per block."""
    ### BEGIN SOLUTION
    tile_a = cuda.shared.array((TILE, TILE), np.float32)
    tile_b = cuda.shared.array((TILE, TILE), np.float32)
    M, K = a.shape
    N = b.shape[1]
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = np.float32(0)
    for start in range(0, K, TILE):
        if row < M and start + tx < K:  # zeros outside the matrices add nothing
            tile_a[ty, tx] = a[row, start + tx]
        else:
            tile_a[ty, tx] = 0
        if start + ty < K and col < N:
            tile_b[ty, tx] = b[start + ty, col]
        else:
            tile_b[ty, tx] = 0
        cuda.syncthreads()  # both tiles are loaded before any thread reads them
        for k in range(TILE):
            acc += tile_a[ty, k] * tile_b[k, tx]
        cuda.syncthreads()  # every thread is done with the tiles before the next step overwrites them
    if row < M and col < N:
        c[row, col] = acc
    ### END SOLUTION


def matmul(a, b):
    """a @ b in float32 for float32 a (M, K) and b (K, N): one launch of matmul_kernel."""
    ### BEGIN SOLUTION
    M, N = a.shape[0], b.shape[1]
    c = np.empty((M, N), np.float32)
    matmul_kernel[(math.ceil(N / TILE), math.ceil(M / TILE)), (TILE, TILE)](a, b, c)
    return c
    ### END SOLUTION


# %% tags=["check"]
check("matmul")
### BEGIN HIDDEN TESTS
check("matmul", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your kernel's report on a 16 x 32 times 32 x 32 product (8 blocks of 64 threads, 4 steps of `K`):
# the two `global load` lines hold the loads of `a` and `b`.

# %%
rng = np.random.default_rng(0)
a_example, b_example = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(
    np.float32)
with simt.profile() as launches:
    assert np.allclose(matmul(a_example, b_example), a_example @ b_example, rtol=1e-4, atol=1e-4)
print(launches[-1])

# %% tags=["check"]
check("matmul_race_free")
### BEGIN HIDDEN TESTS
check("matmul_race_free", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("matmul_tiled_loads")
### BEGIN HIDDEN TESTS
check("matmul_tiled_loads", hidden=True)
### END HIDDEN TESTS
