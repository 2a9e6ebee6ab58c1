# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: fusing an elementwise chain in Triton
#
# **You will learn** why a chain of elementwise operations is limited by the bytes it
# moves, how to count those bytes for the chain as torch runs it and as one fused kernel,
# and how a Triton program broadcasts a bias over the rows of a matrix.
#
# The feed-forward block of a transformer ends with a bias, a GELU and a residual
# connection: for `x` and `residual` of shape `M x N` (`M` tokens, `N` features) and a
# bias of `N` values, one per column,
#
# $$y = \mathrm{gelu}(x + b) + r, \qquad \mathrm{gelu}(t) = t\,\Phi(t)
#   = \tfrac{1}{2}\, t \left(1 + \mathrm{erf}(t / \sqrt{2})\right).$$
#
# This is the **exact** GELU, `torch.nn.functional.gelu(t)` (its default,
# `approximate="none"`). GPT-2 used the tanh approximation
# $\tfrac12 t (1 + \tanh(\sqrt{2/\pi}(t + 0.044715 t^3)))$, `approximate="tanh"`; the two
# differ by up to $5 \cdot 10^{-4}$, far more than `float32` rounding, so a kernel must
# compute the one it claims.
#
# Written in torch, `F.gelu(x + bias) + residual` runs **three kernels**. Each reads its
# inputs from main memory (HBM on a GPU) and writes its result back:
#
# | kernel | reads | writes |
# | --- | --- | --- |
# | `t = x + bias` | `x` (MN), `bias` (N) | `t` (MN) |
# | `u = gelu(t)` | `t` (MN) | `u` (MN) |
# | `y = u + residual` | `u` (MN), `residual` (MN) | `y` (MN) |
#
# The intermediates `t` and `u` are each written once and read once. A **fused** kernel
# reads `x`, `bias` and `residual` once, keeps `t` and `u` in registers, and writes `y`
# once. Each element costs a few FLOPs, far fewer than an H100 can do in the time its
# bytes take to arrive (its ridge point is hundreds of FLOPs per byte), so both versions
# are **memory-bound**: their time is their bytes divided by the bandwidth, and the ratio of
# bytes is the speed-up to expect.

# %%
from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from aisys import roofline
from aisys.dtypes import bytes_per_element
from aisys.hardware import chip
from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("02-gpu-programming/triton_fused", globals())

DEVICE = device.current()
print(device.describe())


# %% [markdown]
# ## 1. Counting the bytes
#
# `aisys.roofline` counts the minimum traffic of an operation: `roofline.elementwise(n,
# dtype, inputs, outputs)` is a `Cost` whose `.bytes` are `n * (inputs + outputs)` elements
# of `dtype` (`"fp32"`, `"fp16"`, `"bf16"`): every input read once, every output written
# once. It knows nothing of broadcasting: add the bias's `N` elements yourself
# (`bytes_per_element(dtype)` each), once per kernel that reads it.
#
# Write `unfused_bytes(M, N, dtype)`, the bytes of the three torch kernels, and
# `fused_bytes(M, N, dtype)`, the bytes of the fused one.

# %% tags=["solution"]
def unfused_bytes(M, N, dtype="fp32"):
    """Bytes the three kernels t = x + bias, u = gelu(t), y = u + residual move, each to and from memory."""
    ### BEGIN SOLUTION
    n, bias = M * N, N * bytes_per_element(dtype)
    add_bias = roofline.elementwise(n, dtype, inputs=1, outputs=1).bytes + bias  # x in, t out
    gelu = roofline.elementwise(n, dtype, inputs=1, outputs=1).bytes  # t in again, u out
    add_residual = roofline.elementwise(n, dtype, inputs=2, outputs=1).bytes  # u and residual in, y out
    return add_bias + gelu + add_residual
    ### END SOLUTION


def fused_bytes(M, N, dtype="fp32"):
    """Bytes one fused kernel moves: x, bias and residual read once, y written once."""
    ### BEGIN SOLUTION
    return roofline.elementwise(M * N, dtype, inputs=2, outputs=1).bytes + N * bytes_per_element(dtype)
    ### END SOLUTION


# %% tags=["check"]
check("traffic")
### BEGIN HIDDEN TESTS
check("traffic", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What the bytes say, at the datasheet bandwidth of an H100 (3.35 TB/s). The speed-up
# hardly depends on the size or the dtype: about 7/3. The last row is one step of decoding
# with GPT-2 small, 8 sequences of 768 features: its bytes take hundredths of a
# microsecond, far less than the few microseconds of launching a kernel, so there the
# launches set the time, and what fusion saves is two launches of three. And on a real GPU,
# intermediates small enough to stay in its L2 cache (50 MB on an H100) never reach HBM, so
# the unfused chain is faster than this count says: the saving is for large tensors.

# %%
H100 = chip("NVIDIA H100 SXM5 80GB")
print(f"{'M x N':>13} {'dtype':>5} {'unfused MB':>10} {'fused MB':>9} {'unfused us':>10} {'fused us':>9}",
      f"{'speed-up':>8}")
for M, N, dtype in [(4096, 4096, "fp32"), (4096, 4096, "bf16"), (16384, 8192, "bf16"), (8, 768, "fp16")]:
    slow, fast = unfused_bytes(M, N, dtype), fused_bytes(M, N, dtype)
    print(f"{M:>6} x {N:<5} {dtype:>5} {slow / 1e6:10.3f} {fast / 1e6:9.3f} {slow / H100.memory_bandwidth * 1e6:10.2f} "
          f"{fast / H100.memory_bandwidth * 1e6:9.2f} {slow / fast:8.2f}")

# %% [markdown]
# ## 2. The fused kernel
#
# Write `bias_gelu_residual_kernel(x_ptr, bias_ptr, res_ptr, y_ptr, N, BLOCK_N)` for
# contiguous `M x N` matrices, on a 2-D grid `(M, triton.cdiv(N, BLOCK_N))`: program
# `(row, j)` handles columns `j * BLOCK_N ... j * BLOCK_N + BLOCK_N - 1` of row `row`
# (`tl.program_id(0)` and `tl.program_id(1)`), and `triton_bias_gelu_residual(x, bias,
# residual, block)`, which launches it with `BLOCK_N=block` and returns `y` in `x`'s dtype.
#
# - Element `(row, col)` is at offset `row * N + col` of `x`, `residual` and `y`. The bias
#   belongs to the **column**: `bias_ptr + cols`, the same `BLOCK_N` values for every row.
# - The last block of a row is ragged when `N` is not a multiple of `BLOCK_N`: mask every
#   load and the store with `cols < N`. Without the mask the loads read, and the store
#   writes, past the end of the row: into the next row, and past the end of the tensor for
#   the last one. On a GPU that may fault, or silently corrupt other data; here, where
#   `aisys.tensors` makes Triton's interpreter check every address, it stops with an
#   `IndexError` naming the line.
# - Load, convert to `float32`, compute, and convert in the store with
#   `.to(y_ptr.dtype.element_ty)`. `tl.math.erf` is the error function; $1/\sqrt 2 \approx
#   0.7071067811865476$.
#
# `bias_gelu_residual`, below, is what the checks call: numpy in (values of `dtype`),
# numpy `float32` out.

# %% tags=["solution"]
@triton.jit
def bias_gelu_residual_kernel(x_ptr, bias_ptr, res_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    """y[row, cols] = gelu(x[row, cols] + bias[cols]) + residual[row, cols], in float32, exact (erf) GELU."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    offsets = row * N + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    t = x + b
    y = 0.5 * t * (1.0 + tl.math.erf(t * 0.7071067811865476)) + r
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def triton_bias_gelu_residual(x, bias, residual, block=1024):
    """gelu(x + bias) + residual for x, residual (M, N) and bias (N,), tensors on DEVICE, in one kernel."""
    ### BEGIN SOLUTION
    M, N = x.shape
    y = torch.empty_like(x)
    if M and N:
        bias_gelu_residual_kernel[(M, triton.cdiv(N, block))](x, bias, residual, y, N, BLOCK_N=block)
    return y
    ### END SOLUTION


# %%
def bias_gelu_residual(x, bias, residual, dtype="fp32"):
    """What the checks call: numpy in (values of `dtype`), numpy out in `dtype` (bf16 as float32)."""
    x, bias, residual = (to_device(a, dtype) for a in (x, bias, residual))
    return to_numpy(triton_bias_gelu_residual(x, bias, residual))


# %% tags=["check"]
check("bias_gelu_residual")
### BEGIN HIDDEN TESTS
check("bias_gelu_residual", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The hidden cases have rows of 1, 7, 1000 and 5000 columns (ragged against a block of
# 1024), a single row, no rows, and `float16` and `bfloat16` data. For those, your kernel is
# more accurate than torch's three kernels, which round `t` and `u` to 16 bits on the way
# (the checks have rows where that rounding loses everything: `2048 + 0.5` is `2048` in
# `float16`):

# %%
x16, b16, r16 = (a.to(DEVICE, torch.float16) for a in (2 * torch.randn(64, 1000), torch.randn(1000),
                                                        torch.randn(64, 1000)))
exact = F.gelu(x16.double() + b16.double()) + r16.double()
for name, y in [("fused (yours)", triton_bias_gelu_residual(x16, b16, r16)),
                ("torch, 3 kernels", F.gelu(x16 + b16) + r16)]:
    error = (y.double() - exact).abs()
    print(f"{name:17} float16, error: largest {error.max().item():.5f}, mean {error.mean().item():.6f}")

# %% [markdown]
# And the point of fusing: the grader runs `bias_gelu_residual` again in Triton's interpreter,
# on 6 x 1500 matrices, and counts what it launches. One kernel must read `x`, `bias` and
# `residual` once per element of `y` and write `y` once; torch's chain, or three Triton
# kernels, move more than twice the bytes.

# %% tags=["check"]
check("fused_kernel")
### BEGIN HIDDEN TESTS
check("fused_kernel", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. On a GPU
#
# On a machine with an NVIDIA GPU the cell below times your kernel against torch's three
# with `aisys.bench`, counting the bytes each moves as you did: the first row's speed-up is
# over torch's chain, the second row shows that chain's own bandwidth. If both run at the
# same fraction of the bandwidth, the speed-up is the ratio of bytes; on a CPU the cell only
# says so.

# %%
if DEVICE == "cuda":
    from aisys import bench

    def chain_inputs(shape):
        M, N = shape
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        return x, torch.randn(N, device="cuda", dtype=x.dtype), torch.randn(M, N, device="cuda", dtype=x.dtype)

    def torch_chain(x, bias, residual):
        return F.gelu(x + bias) + residual

    # Compared with torch's result: it rounds t and u to bfloat16 (2**-8 relative), so allow that much.
    fused = bench.Benchmark("fused (yours)", triton_bias_gelu_residual, torch_chain,
                            make_inputs=chain_inputs, bytes=lambda shape: fused_bytes(*shape, "bf16"), atol=0.1)
    unfused = bench.Benchmark("torch, 3 kernels", torch_chain, None,
                              make_inputs=chain_inputs, bytes=lambda shape: unfused_bytes(*shape, "bf16"))
    print(bench.table(bench.measure([fused, unfused], sizes=[(8192, 4096), (16384, 8192)])))
else:
    print("no GPU here: the kernels ran in Triton's interpreter, which says nothing about speed")


# %% [markdown]
# ## 4. Graded speed (on a GPU)
#
# Where the grader has a GPU, two more checks time your `triton_bias_gelu_residual` on a 16384
# x 8192 bfloat16 matrix: 1 point if it moves the bytes `fused_bytes` counts at 40% or more of
# the GPU's copy bandwidth, 1 more at 60% or more. The kernel above reaches about 83% on an
# H200; torch's chain of ops (in float32, as precise), about 10%.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with a copy of as
# many bytes, measured in the same run. Without a GPU both checks are skipped, and the notebook
# is graded without their points.

# %% tags=["check"]
check("bias_gelu_residual_speed")
### BEGIN HIDDEN TESTS
check("bias_gelu_residual_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bias_gelu_residual_near_copy_speed")
### BEGIN HIDDEN TESTS
check("bias_gelu_residual_near_copy_speed", hidden=True)
### END HIDDEN TESTS
