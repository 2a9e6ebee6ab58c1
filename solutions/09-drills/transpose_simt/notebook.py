# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a coalesced transpose through shared memory
#
# **You will learn** to write the transpose an interviewer asks for when they ask about memory access on a
# GPU: one whose global loads **and** stores are coalesced, through a shared-memory tile padded so that
# reading it by column has no bank conflicts, with a barrier in the right place and bounds checks for sizes
# that are not multiples of the tile.
#
# **The conventions, all of them:**
# - `transpose(a)`: `a` is a 2-D float32 array of shape `(rows, cols)`; return a new float32 array of shape
#   `(cols, rows)` equal to `a.T`, bit for bit (a transpose moves values, it computes nothing). A matrix
#   with no elements returns an empty `(cols, rows)` array without launching a kernel (a launch needs at
#   least one block);
# - write it in the thread-level dialect, `from aisys.simt import cuda` (numba-cuda's): a `@cuda.jit` kernel
#   launched as `kernel[grid, block](a, out)`; a launch with numpy arrays copies the results back into them.
#   On this machine the kernel runs in a simulator that reports, per source line, the 32-byte sectors each
#   global access touched, the shared-memory bank conflicts, and any race or barrier error;
# - **the launch**: tiles of `TILE x TILE = 32 x 32` elements; blocks of `(32, 8)` threads (`threadIdx.x`
#   along the columns of `a`, 0..31; `threadIdx.y` 0..7), each thread moving `TILE // 8 = 4` elements of its
#   tile; a grid of `(ceil(cols / 32), ceil(rows / 32))` blocks, block `(bx, by)` moving the tile of `a` at
#   block row `by`, block column `bx` to block row `bx`, block column `by` of `out`. (The checks grade the
#   patterns below, not the launch's shape: another launch with the same patterns passes.)
# - **coalesced**: the lanes of a warp read consecutive elements of a row of `a` and write consecutive
#   elements of a row of `out`; graded on a 64 x 32 matrix (whole tiles), where the bytes your kernel moves
#   between global memory and the chip must be at least 90 % bytes it uses, as the reference's are (100 %);
# - **no bank conflicts**: shared memory has 32 banks of 4-byte words, word `k` in bank `k % 32`; graded on
#   the same matrix: no more conflicts than the reference, which has none. A `(32, 32)` tile read by column
#   is a 32-way conflict; a `(32, 33)` tile is conflict-free. A shared array's shape must be numbers or
#   global constants, not an expression (numba fixes it when it compiles): use `TILE_PADDED = TILE + 1`;
# - **no race and no barrier error**, on a ragged 33 x 65 matrix and on the 64 x 32 one: every thread of
#   a block reaches the same `cuda.syncthreads()` (never inside an `if`);
# - the values are graded on shapes from 1 x 1 to 64 x 32, ragged ones and single rows and columns included.
#
# **What is graded where.** The checks call `transpose` in your notebook for its values, but read
# coalescing, bank conflicts and races from a run of their own: the grader takes the source of the cells you
# ran, keeps their imports, `def`s and assignments to names, and runs them again in a fresh process, in its
# own simulator. Only the kernel dialect runs there: arithmetic, comparisons, indexing and slicing, tuples,
# `if`/`for`/`while`, `def` decorated with `@cuda.jit`; imports of `numpy`, `math` and `aisys.simt`, with
# `cuda.*` and the numpy functions this exercise uses; no `class`, `with`, `global` or `yield`, no name
# starting with `_`. A check that needs a definition outside the dialect fails, naming its line and why.

# %%
import math

import numpy as np

from aisys.simt import cuda
from aisys_grader import checker

check = checker("09-drills/transpose_simt", globals())

# %% tags=["solution"]
TILE = 32  # a tile is TILE x TILE elements, one warp wide
TILE_PADDED = TILE + 1  # columns of the shared tile
BLOCK_ROWS = 8  # a block is TILE x BLOCK_ROWS threads; each thread moves TILE // BLOCK_ROWS elements


@cuda.jit
def transpose_kernel(a, out):
    """out[j, i] = a[i, j] for the TILE x TILE tile of `a` at block (blockIdx.y, blockIdx.x)."""
    ### BEGIN SOLUTION
    tile = cuda.shared.array((TILE, TILE_PADDED), np.float32)  # the + 1 shifts each row by one bank
    rows, cols = a.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y

    col = cuda.blockIdx.x * TILE + tx  # a warp reads consecutive columns of a row of `a`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + r
        if row < rows and col < cols:
            tile[r, tx] = a[row, col]
    cuda.syncthreads()  # the whole tile is written before any thread reads what another wrote

    col = cuda.blockIdx.y * TILE + tx  # ... and writes consecutive columns of a row of `out`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.x * TILE + r
        if row < cols and col < rows:
            out[row, col] = tile[tx, r]
    ### END SOLUTION


def transpose(a):
    """a.T of a 2-D float32 array, through coalesced loads and stores and a padded shared tile."""
    ### BEGIN SOLUTION
    rows, cols = a.shape
    out = np.empty((cols, rows), np.float32)
    if a.size == 0:
        return out
    grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
    transpose_kernel[grid, (TILE, BLOCK_ROWS)](np.ascontiguousarray(a), out)
    return out
    ### END SOLUTION


# %% tags=["check"]
check("transpose")
### BEGIN HIDDEN TESTS
check("transpose", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("transpose_coalesced")
### BEGIN HIDDEN TESTS
check("transpose_coalesced", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("transpose_no_bank_conflicts")
### BEGIN HIDDEN TESTS
check("transpose_no_bank_conflicts", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("transpose_race_free")
### BEGIN HIDDEN TESTS
check("transpose_race_free", hidden=True)
### END HIDDEN TESTS
