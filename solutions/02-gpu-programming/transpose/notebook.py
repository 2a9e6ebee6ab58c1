# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: matrix transpose through shared memory
#
# **You will learn** why the order in which the 32 threads of a warp touch memory decides how
# fast a kernel moves data, how a tile in shared memory turns a strided access into two
# contiguous ones, and how one element of padding removes the bank conflicts the tile would
# otherwise cause.
#
# A transpose does no arithmetic: `out[j, i] = a[i, j]`. It is as fast as its memory traffic,
# and that traffic comes in **sectors** of 32 bytes. When the 32 lanes of a warp load or
# store 32 consecutive `float32` values, the hardware moves 128 bytes in 4 sectors: the
# access is *coalesced*. When each lane touches a different row, the warp moves 32 sectors,
# 1 KiB, to use 128 bytes of it.
#
# The kernels below run in a simulator on the CPU (on a machine with an NVIDIA GPU,
# `aisys.simt.cuda` is numba-cuda and they run on the GPU). Inside `with simt.profile()`,
# the simulator reports, for every source line, the sectors each access touched against the
# fewest that would hold its bytes, the bank conflicts of shared memory, and any race.
# Write the functions yourself: when grading, the reference `aisys.cuda_kernels` cannot be
# imported.
#
# **What is graded where.** The checks call your functions in your notebook for their
# results, but read coalescing, bank conflicts, divergence and races from a run of their
# own: the grader takes the source of the cells you ran, keeps their imports, `def`s and
# assignments to names (a later one replaces an earlier one; calls, loops and `with` blocks
# such as the demos are left out), and runs them again in a fresh process, in its own
# simulator, which nothing your notebook does can reach. Only the kernel dialect runs there:
# arithmetic, comparisons, indexing and slicing, tuples, lists, dicts, comprehensions,
# `if`/`for`/`while`, `try`/`raise`, lambdas, f-strings, `def` decorated with `@cuda.jit`,
# `@functools.cache` or `@functools.lru_cache` only; imports of `numpy`, `math`, `functools`
# and `aisys.simt`, with `cuda.*` and the numpy functions and array attributes these
# exercises use; no `class`, `with`, `global` or `yield`, no name or attribute starting with
# `_`, no `getattr`, `eval`, `open` or `type`. A check that needs a definition outside the
# dialect fails, naming its line, the construct and why: in this notebook as when grading.

# %%
import math

import numpy as np

from aisys import simt
from aisys.simt import cuda
from aisys_grader import checker

check = checker("02-gpu-programming/transpose", globals())


# %% [markdown]
# ## 1. The naive transpose
#
# One thread per element, with `threadIdx.x` along the columns of `a`: lanes of a warp read
# consecutive elements of a row of `a` (coalesced) and write them down a column of `out`,
# each into a different row (strided). Read the `global` lines of the report: the load
# touches as many sectors as it needs, the store eight times as many.

# %%
@cuda.jit
def transpose_naive_kernel(a, out):
    row, col = cuda.blockIdx.y * 32 + cuda.threadIdx.y, cuda.blockIdx.x * 32 + cuda.threadIdx.x
    if row < a.shape[0] and col < a.shape[1]:
        out[col, row] = a[row, col]


def transpose_naive(a):
    out = np.empty((a.shape[1], a.shape[0]), a.dtype)
    transpose_naive_kernel[(math.ceil(a.shape[1] / 32), math.ceil(a.shape[0] / 32)), (32, 32)](a, out)
    return out


example = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
with simt.profile() as naive_launches:
    assert (transpose_naive(example) == example.T).all()
print(naive_launches[-1])

# %% [markdown]
# ## 2. A tiled transpose
#
# Let a block of threads move one `TILE x TILE` tile (`TILE = 32`) in two steps:
#
# 1. **Load**: lanes with consecutive `threadIdx.x` read consecutive elements of a row of the
#    tile of `a` and store them in the same place of a tile in shared memory,
#    `tile[r, threadIdx.x]`.
# 2. `cuda.syncthreads()`: a thread is about to read what *other* threads wrote.
# 3. **Store**: lanes with consecutive `threadIdx.x` write consecutive elements of a row of
#    `out`, which is a column of the tile: `out[..., ...] = tile[threadIdx.x, r]`. The tile of
#    `a` at block row `by` and block column `bx` lands in `out` at block row `bx`, block
#    column `by`.
#
# Both global accesses are now coalesced; the strided one moved to shared memory, which has
# no sectors but 32 **banks**: the 4-byte word at index `k` of a shared array lies in bank
# `k % 32`, and a bank serves one word per cycle. In a `(32, 32)` tile, element `(r, c)` is
# word `32 r + c`, so a column lies in a single bank and the warp reading it is served one
# lane at a time: a 32-way bank conflict. Give the tile `TILE + 1` columns instead: element
# `(r, c)` is then in bank `(33 r + c) % 32 = (r + c) % 32`, and a column spans all 32 banks.
# The shape of a shared array must be numbers or global constants (numba fixes it when it
# compiles the kernel), not an expression: use the global `TILE_PADDED = TILE + 1`.
#
# Details that matter:
#
# - Shapes are not multiples of the tile (1 x 37, 33 x 65, 100 x 31): guard every global
#   access with a bounds check, but let **every** thread reach `cuda.syncthreads()` (never
#   put the barrier inside the `if`).
# - A block of `(32, 32)` threads is fine; `(32, 8)` threads, each moving `TILE // 8 = 4`
#   rows in a loop, is the classic choice: each thread's index arithmetic serves four elements.
# - `transpose` takes `float32` or `int32`. A shared array's dtype is fixed when the kernel
#   is compiled; as a transpose only moves 4-byte words, you may view either input as
#   `int32` (`a.view(np.int32)`) and use one `int32` tile.
# - Return a new array of shape `(cols, rows)` and the input's dtype; a launch with numpy
#   arrays copies the results back into them. A launch needs at least one block, so an empty
#   matrix returns before launching.

# %% tags=["solution"]
TILE = 32  # a tile is TILE x TILE elements, one warp wide
TILE_PADDED = TILE + 1  # columns of the padded shared tile
BLOCK_ROWS = 8  # a block is TILE x BLOCK_ROWS threads; each thread moves TILE // BLOCK_ROWS elements


@cuda.jit
def transpose_kernel(a, out):
    """out[j, i] = a[i, j] for the TILE x TILE tile of `a` at block (blockIdx.y, blockIdx.x)."""
    ### BEGIN SOLUTION
    tile = cuda.shared.array((TILE, TILE_PADDED), np.int32)  # the + 1 shifts each row by one bank
    rows, cols = a.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y

    col = cuda.blockIdx.x * TILE + tx  # a warp reads consecutive columns of a row of `a`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + r
        if row < rows and col < cols:
            tile[r, tx] = a[row, col]
    cuda.syncthreads()  # the tile is written by all threads of the block before any of it is read

    col = cuda.blockIdx.y * TILE + tx  # ... and writes consecutive columns of a row of `out`
    for r in range(ty, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.x * TILE + r
        if row < cols and col < rows:
            out[row, col] = tile[tx, r]
    ### END SOLUTION


def transpose(a):
    """a.T of a 2-D float32 or int32 array, through coalesced loads and stores and a padded shared tile."""
    ### BEGIN SOLUTION
    rows, cols = a.shape
    out = np.empty((cols, rows), a.dtype)
    if a.size == 0:
        return out
    # A transpose only moves 4-byte words, so one int32 kernel serves both dtypes.
    grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
    transpose_kernel[grid, (TILE, BLOCK_ROWS)](np.ascontiguousarray(a).view(np.int32), out.view(np.int32))
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

# %% [markdown]
# ## 3. What the tile and the padding buy
#
# The same tiled kernel with an unpadded `(32, 32)` tile is coalesced, but its store step
# reads a column of the tile: each of those reads is 32 wavefronts instead of one. Compare
# the three reports on the same 64 x 64 matrix: the naive kernel wastes sectors, the
# unpadded tile wastes shared-memory cycles, yours wastes neither.

# %%
@cuda.jit
def transpose_unpadded_kernel(a, out):
    tile = cuda.shared.array((32, 32), np.float32)  # no padding: a column of the tile is one bank
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for r in range(ty, 32, 8):
        tile[r, tx] = a[cuda.blockIdx.y * 32 + r, cuda.blockIdx.x * 32 + tx]  # full tiles only
    cuda.syncthreads()
    for r in range(ty, 32, 8):
        out[cuda.blockIdx.x * 32 + r, cuda.blockIdx.y * 32 + tx] = tile[tx, r]


def transpose_unpadded(a):
    out = np.empty((a.shape[1], a.shape[0]), a.dtype)
    transpose_unpadded_kernel[(a.shape[1] // 32, a.shape[0] // 32), (32, 8)](a, out)
    return out


with simt.profile() as unpadded_launches:
    assert (transpose_unpadded(example) == example.T).all()
with simt.profile() as tiled_launches:
    assert (transpose(example) == example.T).all()

for name, launches in [("naive", naive_launches), ("unpadded tile", unpadded_launches),
                       ("padded tile (yours)", tiled_launches)]:
    report = launches[-1]
    print(f"{name:20} global efficiency {report['global']['efficiency']:5.0%}   "
          f"shared bank conflicts {report['shared']['bank_conflicts']:5d}")
print()
print(unpadded_launches[-1])
print(tiled_launches[-1])
