# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a Tensor Core GEMM in Triton with `tl.dot`
#
# **You will learn** to write the matrix multiplication $C = A B$ that runs the Tensor Cores:
# one program per `BLOCK_M x BLOCK_N` tile of $C$, a loop over $K$ that multiplies a tile
# of $A$ by a tile of $B$ with `tl.dot`, an accumulator in **float32** while the inputs are
# float16 or bfloat16, masks for sizes that are not multiples of the tile; the **grouped**
# order of programs that lets the L2 cache serve most loads; and the **autotuning** list of
# tile sizes, warps and pipeline stages, each of which must fit the SM.
#
# $A$ is $M \times K$, $B$ is $K \times N$, and $C_{mn} = \sum_k A_{mk} B_{kn}$: $2MNK$ FLOPs
# on $MK + KN$ inputs. A program that holds a `BLOCK_M x BLOCK_N` tile of $C$ reads a
# `BLOCK_M x BLOCK_K` tile of $A$ and a `BLOCK_K x BLOCK_N` tile of $B$ per step of $K$ and
# does `BLOCK_M * BLOCK_N * BLOCK_K` multiply-adds on them: the bigger the
# tile, the more math per byte loaded. `tl.dot` on such tiles is what Triton's compiler turns
# into Tensor Core instructions (`wgmma` on an H100, `mma.sync` on an A100), so this kernel of
# some 25 lines reaches cuBLAS's speed on large matrices.
#
# The functions take numpy matrices and a dtype name, `"fp16"` or `"bf16"` (bf16 data arrives
# as `float32` holding bf16 values, since numpy has no bfloat16), and return a numpy matrix of
# that dtype (bf16 as float32). On a CPU the kernels run in Triton's interpreter, one program
# after the other in numpy: keep the examples small. On a GPU the same code runs compiled.
# Write the kernels yourself: when grading, `aisys.triton_kernels` (the reference) cannot be
# imported.

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import TORCH_DTYPES, to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("03-tensor-cores/triton_gemm", globals())

DEVICE = device.current()
print(device.describe())

# Small tiles for the interpreter; see section 3 for the tiles a GPU wants.
SMALL_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4, "num_stages": 2}


# %% [markdown]
# ## 1. Which tile does program `pid` compute?
#
# The grid is one-dimensional: programs `0` to `tiles_m * tiles_n - 1`, with
# `tiles_m = cdiv(M, BLOCK_M)` rows of tiles and `tiles_n = cdiv(N, BLOCK_N)` columns. The GPU
# starts them roughly in that order, as many at once as fit its SMs (132 on an H100, one or
# two big GEMM programs each), so the mapping from `pid` to a tile decides which rows of $A$
# and columns of $B$ are being read at the same time.
#
# **Row-major** order (`pid_m = pid // tiles_n`, `pid_n = pid % tiles_n`) sweeps a whole row
# of tiles before the next. The programs in flight then share one or two row panels of $A$
# but need *every* column panel of $B$, and by the time the next row of tiles comes round,
# the first panels of $B$ have left the L2 cache: $B$ is read from memory once per row of tiles.
# **Grouped** order (Triton's matmul tutorial) sweeps `GROUP_M` rows of tiles column by
# column: programs `0 .. GROUP_M-1` take column 0 of rows `0 .. GROUP_M-1`, the next
# `GROUP_M` take column 1, and so on; then the next group of rows. A group has
# `GROUP_M * tiles_n` programs; the last group has only the rows that are left,
# `min(tiles_m - first_m, GROUP_M)`, and must not step outside them.
# For a $5 \times 4$ grid of tiles and `GROUP_M = 2`, the program numbers are:
#
# ```
#  0  2  4  6
#  1  3  5  7
#  8 10 12 14
#  9 11 13 15
# 16 17 18 19     <- the last group has one row
# ```
#
# Write `tile_of(pid, tiles_m, tiles_n, GROUP_M)`, a `@triton.jit` function that returns the
# pair `(pid_m, pid_n)`; your kernel in section 2 will call it. `program_order` (given) runs it
# in a small kernel and returns the tile of every program. `GROUP_M = 1` is row-major order.

# %% tags=["solution"]
@triton.jit
def tile_of(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n): the tile of C that program `pid` computes, GROUP_M rows of tiles swept column by column."""
    ### BEGIN SOLUTION
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)  # the last group may be shorter
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    return pid_m, pid_n
    ### END SOLUTION


# %%
@triton.jit
def order_kernel(order_ptr, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Row `pid` of the (programs, 2) int32 matrix at order_ptr = tile_of(pid, ...)."""
    pid = tl.program_id(0)
    pid_m, pid_n = tile_of(pid, tiles_m, tiles_n, GROUP_M)
    tl.store(order_ptr + 2 * pid, pid_m)
    tl.store(order_ptr + 2 * pid + 1, pid_n)


def program_order(tiles_m, tiles_n, group_m, programs=None):
    """The (pid_m, pid_n) that tile_of gives programs 0, 1, ... of a tiles_m x tiles_n grid: an int array
    (programs, 2), of every program or of the first `programs`."""
    programs = tiles_m * tiles_n if programs is None else programs
    order = torch.full((programs, 2), -1, dtype=torch.int32, device=DEVICE)
    try:
        order_kernel[(programs,)](order, tiles_m, tiles_n, GROUP_M=group_m)
    except Exception as error:  # the interpreter wraps what tile_of raises: say plainly that it is not written yet
        if "NotImplementedError" in str(error):
            raise NotImplementedError("write tile_of first") from error
        raise
    return to_numpy(order)


grid = np.full((5, 4), -1)
for pid, (m, n) in enumerate(program_order(5, 4, 2)):
    grid[m, n] = pid
print(grid)

# %% tags=["check"]
check("program_order")
### BEGIN HIDDEN TESTS
check("program_order", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What grouping buys: an 8192 x 8192 x 8192 GEMM in 128 x 128 tiles has a 64 x 64 grid. The
# first 132 programs, one per SM of an H100, run together and read the row panels of $A$ and
# the column panels of $B$ counted below, each 128 x 8192 BF16 numbers, 2 MiB. In row-major
# order they span a few rows of tiles and every column, far more than the 50 MB of L2 holds,
# so a panel of $B$ is gone before the next row of tiles needs it. Grouped, they cover a
# squarer patch of $C$ from about a third of the panels, and each panel serves many programs
# from L2 (the chapter's page on tiling counts the bytes):

# %%
def panels(order):
    """Distinct rows of tiles (panels of A) and columns of tiles (panels of B) that the programs of `order` use."""
    return len(set(order[:, 0].tolist())), len(set(order[:, 1].tolist()))


panel_mib = 128 * 8192 * 2 / 2**20
for group_m in (1, 8):
    a_panels, b_panels = panels(program_order(64, 64, group_m, programs=132))
    print(f"GROUP_M = {group_m}: {a_panels} panels of A + {b_panels} of B = "
          f"{(a_panels + b_panels) * panel_mib:.0f} MiB for 132 tiles")


# %% [markdown]
# ## 2. The kernel
#
# Write `matmul_kernel`: program `pid` computes the tile `(pid_m, pid_n) = tile_of(...)`.
# With `offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)`, `offs_n` likewise and
# `offs_k = tl.arange(0, BLOCK_K)`, the pointers to the first tiles of $A$ and $B$ are
#
# ```
# a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak    # (BLOCK_M, BLOCK_K)
# b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn    # (BLOCK_K, BLOCK_N)
# ```
#
# Then, for each of the `cdiv(K, BLOCK_K)` steps: load both tiles, add their product
# to the accumulator with `acc = tl.dot(a, b, acc)`, and move `a_ptrs` by `BLOCK_K` columns of
# $A$ (`BLOCK_K * stride_ak`) and `b_ptrs` by `BLOCK_K` rows of $B$ (`BLOCK_K * stride_bk`).
# Finally store `acc`, converted to C's dtype (`acc.to(c_ptr.dtype.element_ty)`), at
# `c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn`.
#
# **Masks.** Rows of the tile past $M$, columns past $N$ and, in the last step, the $k$ past
# $K$ must load 0 (`other=0.0`), which adds nothing to any dot product, and the store must
# skip rows past $M$ and columns past $N$. In the step that starts at `k0`, the valid `k` are
# `offs_k < K - k0`. (A tile of $A$ that hangs over row $M$ reads rows that only feed rows of
# $C$ that are never stored; the mask keeps those loads inside the matrix, which matters on a
# GPU, where memory past an allocation may not be mapped. A missing mask on $K$ is worse: it
# reads the next row of $A$ and whatever follows $B$ into every result.)
#
# **The accumulator is float32**: `acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`.
# float16 keeps 11 significant bits: once a running sum reaches 2048, adding 1 changes nothing
# ($2048 + 1$ rounds back to $2048$), and every step of a long $K$ loses up to half a unit in
# the last place; past 65504 the sum is `inf`. The Tensor Cores take float16 or bfloat16
# inputs and add their products in float32 at full speed (Micikevicius et al., *Mixed Precision
# Training*, ICLR 2018), so the inputs are rounded once, on the way in, and the result once,
# at the store.
#
# **bfloat16 in the interpreter.** Triton's interpreter stores bfloat16 as 16-bit integers
# (numpy has no bfloat16), and its `tl.dot` multiplies those integers as they are: the result
# is off by some $10^{10}$. Convert both tiles with `.to(tl.float32)` (exact for bfloat16 values)
# when the constant `UPCAST` is true; the host passes `UPCAST=DEVICE == "cpu" and dtype ==
# "bf16"`, so a GPU keeps bfloat16 tiles and its Tensor Cores. The interpreter also rounds
# float32 to bfloat16 toward zero where a GPU rounds to nearest: the checks allow that unit
# in the last place.
#
# `matmul(a, b, dtype, config=None)` launches `cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)` programs.
# `config` is a dict of the four tile constants and the launch options `num_warps` and
# `num_stages` (`SMALL_CONFIG` when None); pass it all to the launch with `**config`.

# %% tags=["solution"]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  UPCAST: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program: a loop over K of tl.dot into a float32 accumulator."""
    ### BEGIN SOLUTION
    pid_m, pid_n = tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
        if UPCAST:  # the interpreter's tl.dot multiplies bfloat16's bits as integers
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    ### END SOLUTION


def matmul(a, b, dtype, config=None):
    """C = a @ b for matrices a (M x K) and b (K x N) of `dtype` data, accumulated in float32: a numpy (M, N) array."""
    ### BEGIN SOLUTION
    config = SMALL_CONFIG if config is None else config
    a, b = to_device(a, dtype), to_device(b, dtype)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=DEVICE)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        UPCAST=DEVICE == "cpu" and dtype == "bf16", **config)
    return to_numpy(c)
    ### END SOLUTION


# %% [markdown]
# Compare with the exact product (in float64, of the inputs rounded to the dtype), rounded to the
# dtype, on a shape that is a multiple of nothing. With a float32 accumulator nearly every fp16
# element is that rounded value; in bf16 the interpreter, which rounds toward zero, is one unit
# in the last place off for about half of them (a GPU, which rounds to nearest, for almost none):

# %%
rng = np.random.default_rng(0)
a, b = rng.standard_normal((45, 70)), rng.standard_normal((70, 33))
for dtype in ("fp16", "bf16"):
    a_in, b_in = (torch.from_numpy(x).to(TORCH_DTYPES[dtype]).double() for x in (a, b))
    rounded = (a_in @ b_in).to(TORCH_DTYPES[dtype]).double().numpy()
    got = matmul(a, b, dtype).astype(np.float64)
    print(f"{dtype}: {np.mean(got == rounded):.1%} of the elements equal the rounded exact product; "
          f"largest difference {np.abs(got - rounded).max():.3g}")

# %% tags=["check"]
check("matmul")
### BEGIN HIDDEN TESTS
check("matmul", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("matmul_fp32_accumulator")
### BEGIN HIDDEN TESTS
check("matmul_fp32_accumulator", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What makes it a Tensor Core GEMM is its shape, which the grader counts by running `matmul`
# again in Triton's interpreter on a 40 x 40 x 64 `float16` product in 16 x 16 x 16 tiles: one
# program per tile of $C$, every multiply-add in `tl.dot` (a sum of elementwise products with
# `tl.sum` is right, but runs on the ordinary arithmetic units), and each program loading its
# row panel of $A$ and column panel of $B$ once.

# %% tags=["check"]
check("matmul_tiles")
### BEGIN HIDDEN TESTS
check("matmul_tiles", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Autotuning: tiles that fit an H100
#
# The best tile depends on the shape and the GPU: large tiles do more math per byte loaded,
# but a 4096 x 4096 $C$ in 256 x 256 tiles is only 256 programs for 132 SMs, and a tile must
# fit the SM. `triton.autotune` takes a list of `triton.Config`s, times each on the first call
# for every new `(M, N, K)`, and keeps the fastest. Each config here must satisfy:
#
# - `BLOCK_M`, `BLOCK_N`, `BLOCK_K` are powers of two, at least 16: `tl.dot` works on
#   16-wide fragments (the Tensor Cores' instructions take 16 x 8 x 16 or larger pieces);
# - **shared memory**: with `num_stages` pipeline stages, the tiles of $A$ and $B$ for
#   `num_stages` steps of $K$ sit in shared memory at once while the Tensor Cores work on
#   one of them, `num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2` bytes, at most the
#   227 KiB an H100 gives one thread block; `num_stages` at least 2 (one tile computed on
#   while the next one loads);
# - `num_warps` is 4 or 8: Hopper's `wgmma` is issued by a *warpgroup* of 4 warps;
# - **registers**: the float32 accumulator is spread over the program's threads,
#   `BLOCK_M * BLOCK_N / (32 * num_warps)` registers each, which must leave room for the
#   rest in a thread's 255: at most 128;
# - keys `BLOCK_M`, `BLOCK_N`, `BLOCK_K`, `GROUP_M` (a positive integer), nothing else.
#
# Write `gpu_configs()`, returning at least two distinct configs; `config_dicts()` (given)
# turns them into the dicts `matmul` takes. The checks test each rule, and run your kernel on a
# ragged matrix under each config (in the interpreter, where the tile size costs little).

# %% tags=["solution"]
def gpu_configs():
    """The triton.Config list to autotune matmul_kernel over on an H100."""
    ### BEGIN SOLUTION
    def config(block_m, block_n, block_k, stages, warps):
        return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8},
                             num_stages=stages, num_warps=warps)

    return [
        config(128, 256, 64, 3, 8),  # 144 KiB of shared memory, 128 accumulators per thread
        config(256, 128, 64, 3, 8),
        config(128, 128, 64, 4, 4),  # 128 KiB
        config(64, 256, 64, 4, 4),
        config(128, 64, 64, 4, 4),
        config(64, 64, 64, 4, 4),  # small matrices: more programs
    ]
    ### END SOLUTION


# %%
def config_dicts():
    """gpu_configs() as plain dicts: the tile constants with num_warps and num_stages, as matmul takes them."""
    return [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in gpu_configs()]


for config in config_dicts():
    print(config)

# %% tags=["check"]
check("gpu_configs")
### BEGIN HIDDEN TESTS
check("gpu_configs", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("matmul_every_config")
### BEGIN HIDDEN TESTS
check("matmul_every_config", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On a GPU, the cell below autotunes your kernel over your configs on a 4096 x 4096 x 4096
# BF16 GEMM and times it against `torch.matmul` (cuBLAS) with `triton.testing.do_bench`. The
# reference kernel, with a similar list, measured 0.96x cuBLAS at this size on an H100 and
# 1.00x at 8192 (about 650 TFLOP/s, two thirds of the 989 TFLOP/s on the datasheet).

# %%
if DEVICE == "cuda":
    size = 4096
    x, y = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    z = torch.empty_like(x)
    tuned = triton.autotune(configs=gpu_configs(), key=["M", "N", "K"])(matmul_kernel)

    def tuned_matmul():
        def grid(meta):
            return (triton.cdiv(size, meta["BLOCK_M"]) * triton.cdiv(size, meta["BLOCK_N"]),)

        tuned[grid](x, y, z, size, size, size, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                    z.stride(0), z.stride(1), UPCAST=False)

    ms_triton = triton.testing.do_bench(tuned_matmul)
    ms_torch = triton.testing.do_bench(lambda: x @ y)
    print("fastest config:", tuned.best_config)
    for name, ms in (("your kernel", ms_triton), ("torch.matmul", ms_torch)):
        print(f"{name}: {ms:.3f} ms, {2 * size**3 / ms / 1e9:.0f} TFLOP/s")
else:
    print("no GPU here: on one, this cell autotunes matmul_kernel over gpu_configs() and times it against cuBLAS")


# %% [markdown]
# ## 4. Graded speed (on a GPU)
#
# Where the grader has a GPU, two more checks time your `matmul` on two 8192 x 8192 bfloat16
# matrices, with each of your `config_dicts()` briefly and the fastest at length: 1 point if it
# runs at 40% or more of cuBLAS's speed (`torch.matmul`), 1 more at 60% or more. The configs
# above reach about 82% on an H200; 32 x 32 and 32 x 64 tiles, about 24%. Every config you list
# must compile and run on the GPU.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with
# `torch.matmul` on the same inputs, measured in the same run. Without a GPU both checks are
# skipped, and the notebook is graded without their points.

# %% tags=["check"]
check("matmul_speed")
### BEGIN HIDDEN TESTS
check("matmul_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("matmul_near_cublas_speed")
### BEGIN HIDDEN TESTS
check("matmul_near_cublas_speed", hidden=True)
### END HIDDEN TESTS
