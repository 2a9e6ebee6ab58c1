# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: three kernels in CUDA C — a sum, a softmax and a transpose
#
# **You will learn** to write the block-level kernels of this chapter in CUDA C, the
# language of GPU interviews and of most production kernels: a reduction with a
# shared-memory tree and warp shuffles over many blocks, a numerically stable row-wise
# softmax built on block-level reductions, and a transpose through a padded tile that is
# coalesced on both sides. You launch them from Python with CuPy.
#
# **This exercise needs an NVIDIA GPU.** On a machine without one (or without CuPy, the
# `gpu` extra: `pip install -e '.[gpu]'`) every check says `skipped: needs a GPU`: it
# neither passes nor fails, and a grader without a GPU records no grade for this notebook.
# You can still write the kernels on a laptop, and `cuda_c.ptx(source)` compiles them with
# NVIDIA's compiler (no GPU needed), so that syntax errors show before you reach a GPU.
#
# **CuPy's `RawKernel`.** `cupy.RawKernel(source, "name")` compiles the CUDA C function
# `name` of `source` with NVRTC the first time it is launched (CuPy caches the binary);
# `compile_kernel(source, name)`, defined in the next cell, does that once per source. A launch is
# `kernel(grid, block, args)`: `grid` and `block` are tuples of up to three sizes, and
# `args` the kernel's parameters in order. A CuPy array passes its device pointer; a
# number must be a NumPy scalar of the parameter's C type (`np.int64(n)` for a
# `long long`, `np.int32(cols)` for an `int`), because the launch copies its bytes into
# the parameter as they are. `cupy.asarray(x)` copies a NumPy array to the GPU,
# `cupy.empty(shape, cupy.float32)` allocates there, and `y.get()` copies back.
#
# Each kernel below comes with its signature; write its body in CUDA C where the source
# says `YOUR CODE HERE` (replace those two lines), and the Python function that launches
# it. When grading, the reference `aisys.cuda_c.reduction`, `.softmax` and `.transpose`
# cannot be imported.

# %%
import numpy as np

from aisys import cuda_c
from aisys_grader import checker

try:
    import cupy
except ImportError:  # no GPU extra: the kernels cannot run here, and the checks are skipped
    cupy = None

check = checker("02-gpu-programming/cuda_c", globals())
problem = cuda_c.unavailable()
print(f"CUDA C kernels cannot run here ({problem}): the checks are skipped" if problem else "CUDA C kernels run here")

BLOCK = 256  # threads per block of the sum and of the softmax (the sources #define the same number)
WARP = 32
TILE = 32  # the transpose moves TILE x TILE tiles with blocks of TILE x BLOCK_ROWS threads
BLOCK_ROWS = 8


def compile_kernel(source: str, name: str):
    """The kernel `name` of a CUDA C source, compiled once (NotImplementedError while its body is still to write)."""
    if "NotImplementedError" in source:
        raise NotImplementedError(f"write the CUDA C body of {name} first")
    return cuda_c.raw_kernel(source, name)


# %% [markdown]
# ## 1. A sum over many blocks
#
# Part 1 of this chapter built a reduction in stages; here is the whole of it in CUDA C.
# `block_sum(x, partial, n)` runs with `BLOCK = 256` threads per block:
#
# 1. Each thread adds its elements in a register with a **grid-stride loop**: element
#    `i = blockIdx.x * BLOCK + tid`, then `i + gridDim.x * BLOCK`, ... while `i < n`. A warp
#    reads 32 consecutive floats a step (coalesced), and adding many elements per thread
#    first makes the rest of the work small. Use `long long` for `i`: past $2^{31}$
#    elements an `int` wraps around.
# 2. The block adds its 256 sums as a **tree in shared memory**: thread `tid` stores its
#    sum in `sdata[tid]`, then at each level `s = 128, 64, 32` threads `tid < s` add
#    `sdata[tid + s]` into `sdata[tid]` (sequential addressing: whole warps busy or idle,
#    no bank conflicts). Every level reads what *other warps* wrote before it, so a
#    `__syncthreads()` must separate them, and one must also separate the first level from
#    the stores of the sums.
# 3. The last 32 values are added by one warp **in registers**:
#    `v += __shfl_down_sync(0xffffffff, v, offset)` for `offset = 16, 8, 4, 2, 1` gives lane
#    `i` the value of lane `i + offset`; after five steps lane 0 holds the block's sum and
#    stores it in `partial[blockIdx.x]`. No shared memory and no barrier: a warp's lanes
#    exchange registers directly. (Do not drop the barriers and rely on a warp running in
#    lockstep: since Volta its lanes are scheduled independently.)
#
# `cuda_sum(x)` launches `min(MAX_BLOCKS, ceil(n / BLOCK))` blocks into `partial`, then the
# same kernel as **one block** over the partial sums, and returns the total as a Python
# float (0.0 for an empty `x`, without a launch). Many blocks keep every multiprocessor
# busy: an H100 has 132, and `MAX_BLOCKS = 1024` is about 8 blocks for each. The check
# compares with the exact sum, within `1e-5` of `sum(|x|)`: float32 addition in another
# order rounds differently.

# %% tags=["solution"]
SUM_SOURCE = r"""
#define BLOCK 256
#define WARP 32
#define FULL_MASK 0xffffffffu

// partial[blockIdx.x] = the sum of the x[i] this block's threads step over in a grid-stride loop.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, long long n) {
    // ### BEGIN SOLUTION
    __shared__ float sdata[BLOCK];
    const int tid = threadIdx.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + tid; i < n; i += (long long)gridDim.x * BLOCK)
        acc += x[i];  // a warp reads 32 consecutive floats a step: coalesced
    sdata[tid] = acc;
    for (int s = BLOCK / 2; s >= WARP; s >>= 1) {
        __syncthreads();  // what the other warps stored (the sums above, or the level before) is in sdata
        if (tid < s) sdata[tid] += sdata[tid + s];  // sequential addressing: whole warps busy or idle
    }
    if (tid < WARP) {  // the last 32 values: one warp, in registers, with no barrier
        float v = sdata[tid];  // written by this very thread at the last level
        for (int offset = WARP / 2; offset > 0; offset >>= 1)
            v += __shfl_down_sync(FULL_MASK, v, offset);  // lane i adds lane i + offset's value
        if (tid == 0) partial[blockIdx.x] = v;
    }
    // ### END SOLUTION
}
"""
MAX_BLOCKS = 1024  # blocks of the first pass


def cuda_sum(x):
    """The sum of a 1-D float32 array, as a float: block_sum over many blocks, then over their partial sums."""
    ### BEGIN SOLUTION
    n = x.size
    if n == 0:
        return 0.0
    kernel = compile_kernel(SUM_SOURCE, "block_sum")
    blocks = min(MAX_BLOCKS, -(-n // BLOCK))
    partial, total = cupy.empty(blocks, cupy.float32), cupy.empty(1, cupy.float32)
    kernel((blocks,), (BLOCK,), (cupy.asarray(x, dtype=cupy.float32), partial, np.int64(n)))
    kernel((1,), (BLOCK,), (partial, total, np.int64(blocks)))  # one block adds the partial sums
    return float(total.get()[0])
    ### END SOLUTION


# %% tags=["check"]
check("cuda_sum")
### BEGIN HIDDEN TESTS
check("cuda_sum", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. A numerically stable softmax, one block per row
#
# $\mathrm{softmax}(x)_j = e^{x_j} / \sum_k e^{x_k}$ overflows float32 as soon as some
# $x_j > 88.7$: $e^{89}$ is larger than the largest float, and the result is `inf / inf =
# NaN`. Subtracting the row's maximum $m$ first changes nothing mathematically (the factor
# $e^{-m}$ cancels) and makes every exponent $\le 0$: no term overflows, and the largest is
# exactly 1, so the sum is at least 1. An entry of `-inf` (a masked position) then gives
# $e^{-\infty} = 0$, as it should.
#
# `softmax_rows(x, y, cols)` runs one block of `BLOCK` threads per row (`blockIdx.x` is the
# row), in three sweeps over the row, each thread stepping `j = tid, tid + BLOCK, ...`
# (coalesced):
#
# 1. each thread's maximum, then the **block's maximum** `m`;
# 2. each thread's sum of `expf(x[j] - m)`, then the **block's sum** `s`;
# 3. `y[j] = expf(x[j] - m) / s`.
#
# A block reduction whose result every thread needs: each warp reduces its 32 values with
# `__shfl_xor_sync(0xffffffff, v, offset)` for `offset = 16, ..., 1`, a butterfly after
# which *every* lane holds the warp's result; lane 0 of each warp stores it in
# `scratch[warp]` (one float per warp, 8 in all); after a barrier, every warp reduces the 8
# values the same way (lanes past 8 contribute the neutral value: `-inf` for a maximum, 0
# for a sum); and a second barrier keeps any warp from overwriting `scratch` (in the next
# reduction) before all have read it. `block_max` and `block_sum` are `__device__`
# functions, which every thread of the block must call (they hold barriers). NVRTC knows no
# `INFINITY` without headers: the source defines `NEG_INF`.
#
# `cuda_softmax(x)` takes a 2-D float32 array and returns its row-wise softmax (an empty
# array of the same shape for an empty `x`, without a launch). A row of `-inf` only has no
# softmax (torch gives NaN); the checks never ask for one.

# %% tags=["solution"]
SOFTMAX_SOURCE = r"""
#define BLOCK 256
#define WARP 32
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)  // -infinity

// The maximum of v over the block, returned to every thread; scratch holds one float per warp.
__device__ float block_max(float v, float* scratch) {
    // ### BEGIN SOLUTION
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));  // a butterfly: every lane ends with the maximum
    if (lane == 0) scratch[warp] = v;
    __syncthreads();  // every warp's maximum is in scratch
    v = lane < BLOCK / WARP ? scratch[lane] : NEG_INF;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)  // each warp combines all of them
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    __syncthreads();  // every warp has read scratch before it is written again
    return v;
    // ### END SOLUTION
}

// The sum of v over the block, returned to every thread.
__device__ float block_sum(float v, float* scratch) {
    // ### BEGIN SOLUTION
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < BLOCK / WARP ? scratch[lane] : 0.0f;
    for (int offset = WARP / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    __syncthreads();
    return v;
    // ### END SOLUTION
}

// y[r, :] = softmax(x[r, :]) for the row r = blockIdx.x of a row-major matrix with `cols` columns.
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    // ### BEGIN SOLUTION
    __shared__ float scratch[BLOCK / WARP];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = NEG_INF;
    for (int j = threadIdx.x; j < cols; j += BLOCK) m = fmaxf(m, row[j]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += BLOCK) s += expf(row[j] - m);  // every exponent <= 0
    s = block_sum(s, scratch);  // >= 1: the maximum's term is exp(0)
    for (int j = threadIdx.x; j < cols; j += BLOCK) out[j] = expf(row[j] - m) / s;
    // ### END SOLUTION
}
"""


def cuda_softmax(x):
    """The softmax of each row of a 2-D float32 array: softmax_rows with one block of BLOCK threads per row."""
    ### BEGIN SOLUTION
    rows, cols = x.shape
    if x.size == 0:
        return np.empty((rows, cols), np.float32)
    d_x = cupy.asarray(x, dtype=cupy.float32)
    y = cupy.empty_like(d_x)
    compile_kernel(SOFTMAX_SOURCE, "softmax_rows")((rows,), (BLOCK,), (d_x, y, np.int32(cols)))
    return y.get()
    ### END SOLUTION


# %% tags=["check"]
check("cuda_softmax")
### BEGIN HIDDEN TESTS
check("cuda_softmax", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_softmax_stable")
### BEGIN HIDDEN TESTS
check("cuda_softmax_stable", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. A transpose, coalesced on both sides
#
# `out[j][i] = a[i][j]`: read row by row, a naive kernel writes column by column, and the 32
# lanes of a warp then write 32 floats `rows * 4` bytes apart, 32 memory transactions where
# one would do. The fix stages a `TILE x TILE` tile in shared memory: block `(bx, by)`, of
# `TILE x BLOCK_ROWS = 32 x 8` threads, reads the tile of `a` at rows `by * TILE ...` and
# columns `bx * TILE ...` (thread `(tx, ty)` reads rows `ty, ty + 8, ty + 16, ty + 24` of
# it, a warp 32 consecutive floats of a row), and after a `__syncthreads()` writes the tile
# of `out` at rows `bx * TILE ...` and columns `by * TILE ...`, again 32 consecutive floats
# of a row per warp, taking `tile[tx][r]`: a *column* of the tile.
#
# Shared memory has 32 banks of 4 bytes; word `k` lies in bank `k % 32`, and a bank serves
# one word at a time. In a `float tile[32][32]`, the 32 words of a column are 32 apart: all
# in one bank, a 32-way **bank conflict** that serialises the warp's read. Declare
# `float tile[TILE][TILE + 1]`: element `(r, c)` is word `33 r + c`, and a column spans all
# 32 banks. (The padding changes no result, only the speed; the last cell measures it.)
#
# Shapes need not be multiples of 32: `grid = (ceil(cols / TILE), ceil(rows / TILE))`, and
# every load and store checks **both** its row and its column against the matrix (a thread
# outside it still reaches the barrier). `cuda_transpose(a)` returns `a.T` of a 2-D float32
# array, contiguous (an empty array of shape `(cols, rows)` for an empty `a`, without a
# launch). Moving floats changes no bit: the check compares exactly.

# %% tags=["solution"]
TRANSPOSE_SOURCE = r"""
#define TILE 32
#define BLOCK_ROWS 8

// out (cols x rows) = the transpose of a (rows x cols), both row-major; block (x, y) moves tile (y, x) of a.
extern "C" __global__ void transpose_tiled(const float* __restrict__ a, float* __restrict__ out, int rows, int cols) {
    // ### BEGIN SOLUTION
    __shared__ float tile[TILE][TILE + 1];  // the + 1 puts the 32 elements of a tile column in 32 different banks
    int col = blockIdx.x * TILE + threadIdx.x;  // a warp reads 32 consecutive columns of a row of a: coalesced
    for (int r = threadIdx.y; r < TILE; r += BLOCK_ROWS) {
        int row = blockIdx.y * TILE + r;
        if (row < rows && col < cols) tile[r][threadIdx.x] = a[(long long)row * cols + col];
    }
    __syncthreads();  // the whole tile is in shared memory before any thread reads what another stored
    col = blockIdx.y * TILE + threadIdx.x;  // ... and writes 32 consecutive columns of a row of out: coalesced
    for (int r = threadIdx.y; r < TILE; r += BLOCK_ROWS) {
        int row = blockIdx.x * TILE + r;
        if (row < cols && col < rows) out[(long long)row * rows + col] = tile[threadIdx.x][r];
    }
    // ### END SOLUTION
}
"""


def cuda_transpose(a):
    """a.T of a 2-D float32 array, contiguous: transpose_tiled over a grid of TILE x TILE tiles."""
    ### BEGIN SOLUTION
    rows, cols = a.shape
    if a.size == 0:
        return np.empty((cols, rows), np.float32)
    out = cupy.empty((cols, rows), cupy.float32)
    grid = (-(-cols // TILE), -(-rows // TILE))
    d_a = cupy.asarray(np.ascontiguousarray(a, np.float32))  # row-major, as the kernel indexes it
    kernel = compile_kernel(TRANSPOSE_SOURCE, "transpose_tiled")
    kernel(grid, (TILE, BLOCK_ROWS), (d_a, out, np.int32(rows), np.int32(cols)))
    return out.get()
    ### END SOLUTION


# %% tags=["check"]
check("cuda_transpose")
### BEGIN HIDDEN TESTS
check("cuda_transpose", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. How fast? (on a GPU)
#
# Each kernel reads and writes memory once (the softmax reads its row three times, from
# the L2 cache after the first), so its speed is bytes moved per second. The cell times your
# kernels on data already on the GPU with CUDA events, the median of 20 launches, against
# CuPy's own operations, and the transpose with and without the padding of its tile. On a
# laptop it says why it measures nothing.

# %%
def gpu_milliseconds(launch, repeats=20):
    """Median time of `launch()` on the GPU, in ms, from CUDA events around each of `repeats` calls."""
    launch()  # compiles, and warms the caches
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def measure():
    n, rows, cols = 2**26, 4096, 4096
    x, m = cupy.random.random(n, dtype=cupy.float32), cupy.random.random((rows, cols), dtype=cupy.float32)
    partial, total, y = cupy.empty(MAX_BLOCKS, cupy.float32), cupy.empty(1, cupy.float32), cupy.empty_like(m)
    summed = compile_kernel(SUM_SOURCE, "block_sum")
    softmax = compile_kernel(SOFTMAX_SOURCE, "softmax_rows")

    def my_sum():
        summed((MAX_BLOCKS,), (BLOCK,), (x, partial, np.int64(n)))
        summed((1,), (BLOCK,), (partial, total, np.int64(MAX_BLOCKS)))

    def transpose_with(source):
        kernel = compile_kernel(source, "transpose_tiled")
        return lambda: kernel((cols // TILE, rows // TILE), (TILE, BLOCK_ROWS), (m, y, np.int32(rows), np.int32(cols)))

    def cupy_softmax():
        e = cupy.exp(m - m.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    unpadded = TRANSPOSE_SOURCE.replace("[TILE + 1]", "[TILE]")
    rows_of = [("sum", 4 * n, my_sum, lambda: x.sum()),
               ("softmax", 8 * rows * cols, lambda: softmax((rows,), (BLOCK,), (m, y, np.int32(cols))), cupy_softmax),
               ("transpose", 8 * rows * cols, transpose_with(TRANSPOSE_SOURCE), lambda: cupy.ascontiguousarray(m.T))]
    if unpadded != TRANSPOSE_SOURCE:
        rows_of.append(("transpose, unpadded tile", 8 * rows * cols, transpose_with(unpadded), None))
    print(f"{'kernel':26} {'yours':>9} {'GB/s':>7}   {'CuPy':>9} {'GB/s':>7}")
    for name, moved, mine, theirs in rows_of:
        t = gpu_milliseconds(mine)
        line = f"{name:26} {t:7.3f}ms {moved / t / 1e6:7.0f}"
        if theirs is not None:
            t = gpu_milliseconds(theirs)
            line += f"   {t:7.3f}ms {moved / t / 1e6:7.0f}"
        print(line)


if problem:
    print(f"nothing measured: {problem}")
else:
    try:
        measure()
    except NotImplementedError as error:
        print(f"nothing measured: {error}")


# %% [markdown]
# ## 5. Graded speed (on a GPU)
#
# Where the grader has a GPU, six more checks time your three kernels, launched by the
# functions below (provided) as your functions launch them, but on data already on the GPU and
# leaving the result there. For each kernel, 1 point if it moves its bytes at 40% or more of the
# GPU's copy bandwidth, and 1 more at 70% (the sum of 2**28 float32 elements), 60% (the softmax
# of a 16384 x 4096 matrix) or 55% (the transpose of an 8192 x 16384 one). The kernels above
# reach about 98%, 84% and 78% on an H200; a thread summing its own contiguous slice, about 24%,
# and a transpose without the tile, about 13%.
#
# The grader times many repetitions, each on fresh random inputs made on the GPU, with more
# than the L2 cache holds between a repetition's inputs and its kernel. Every repetition's
# result is checked, and its time is compared with a copy of as many bytes, measured in the
# same run. Without a GPU the checks are skipped.

# %%
def sum_on_gpu(x):
    """block_sum launched as cuda_sum launches it, on a CuPy vector on the GPU: the total, a 1-element CuPy array."""
    n = x.size
    blocks = min(MAX_BLOCKS, -(-n // BLOCK))
    partial, total = cupy.empty(blocks, cupy.float32), cupy.empty(1, cupy.float32)
    kernel = compile_kernel(SUM_SOURCE, "block_sum")
    kernel((blocks,), (BLOCK,), (x, partial, np.int64(n)))
    kernel((1,), (BLOCK,), (partial, total, np.int64(blocks)))
    return total


def softmax_on_gpu(x):
    """softmax_rows on a 2-D CuPy float32 array on the GPU, one block of BLOCK threads per row: a CuPy array."""
    y = cupy.empty_like(x)
    compile_kernel(SOFTMAX_SOURCE, "softmax_rows")((x.shape[0],), (BLOCK,), (x, y, np.int32(x.shape[1])))
    return y


def transpose_on_gpu(a):
    """transpose_tiled on a 2-D CuPy float32 array on the GPU: its transpose, a CuPy array."""
    rows, cols = a.shape
    out = cupy.empty((cols, rows), cupy.float32)
    kernel = compile_kernel(TRANSPOSE_SOURCE, "transpose_tiled")
    kernel((-(-cols // TILE), -(-rows // TILE)), (TILE, BLOCK_ROWS), (a, out, np.int32(rows), np.int32(cols)))
    return out


# %% tags=["check"]
check("cuda_sum_speed")
### BEGIN HIDDEN TESTS
check("cuda_sum_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_sum_near_copy_speed")
### BEGIN HIDDEN TESTS
check("cuda_sum_near_copy_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_softmax_speed")
### BEGIN HIDDEN TESTS
check("cuda_softmax_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_softmax_near_copy_speed")
### BEGIN HIDDEN TESTS
check("cuda_softmax_near_copy_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_transpose_speed")
### BEGIN HIDDEN TESTS
check("cuda_transpose_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("cuda_transpose_near_copy_speed")
### BEGIN HIDDEN TESTS
check("cuda_transpose_near_copy_speed", hidden=True)
### END HIDDEN TESTS
