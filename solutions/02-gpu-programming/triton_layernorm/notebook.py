# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: LayerNorm and RMSNorm in Triton
#
# **You will learn** how a Triton program reduces a whole row with a loop over blocks of
# columns, why the masked-off columns of the last block must stay out of every statistic,
# why the statistics are computed in `float32` whatever the data's dtype, why the variance
# takes two passes (the one-pass formula $E[x^2] - E[x]^2$ falls apart in `float32`), and
# where `eps` goes.
#
# LayerNorm normalises each row of `x` (`M x N`: `M` rows of `N` features) by its own mean
# and variance, then scales and shifts each column:
#
# $$\mu = \frac{1}{N}\sum_j x_j, \qquad \sigma^2 = \frac{1}{N}\sum_j (x_j - \mu)^2, \qquad
#   y_j = \frac{x_j - \mu}{\sqrt{\sigma^2 + \varepsilon}}\, w_j + b_j .$$
#
# The variance is the **biased** one (divide by `N`, not `N - 1`): it describes this row,
# it does not estimate a population's, and it is what `torch.nn.functional.layer_norm`
# computes. RMSNorm (Llama, Gemma) drops the mean and the bias:
# $y_j = x_j / \sqrt{\frac{1}{N}\sum_k x_k^2 + \varepsilon}\; w_j$.
#
# Both read `x` once and write `y` once, with a few FLOPs per element: they run at the speed
# of memory, and a kernel that keeps a row on chip while it computes the statistics moves
# the least possible. One Triton **program** per row does that: `tl.program_id(0)` is the
# row, `tl.load` of a block of `BLOCK` columns brings them in at once, and `tl.sum` adds a
# block across its lanes. A row longer than `BLOCK` is read in a loop of blocks.
#
# On a CPU the kernels run in Triton's interpreter (`TRITON_INTERPRET=1`, set by
# `device.use_triton_interpreter()` before `triton` is imported); on a machine with an
# NVIDIA GPU the same code is compiled for it. The interpreter costs about half a
# millisecond per program and step, so the checks use small matrices.

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("02-gpu-programming/triton_layernorm", globals())

DEVICE = device.current()
print(device.describe())


# %% [markdown]
# ## 1. Why two passes
#
# The variance is also $E[x^2] - E[x]^2$, which needs one pass over the row instead of two.
# In `float32` it is a trap. Take a row of values around $10^4$ with a spread of 1 (a
# feature with a large offset): $E[x^2] \approx 10^8$, where consecutive `float32` numbers
# are 8 apart, so $E[x^2]$ and $E[x]^2$ each carry an error of several units and their
# difference, which should be 1, is noise, sometimes negative. This is **catastrophic
# cancellation**: subtracting two nearly equal numbers keeps only their errors.
# Subtracting the mean first and then squaring works with numbers of size 1:

# %%
rng = np.random.default_rng(0)
row = (1e4 + rng.standard_normal(4096)).astype(np.float32)
mean = row.mean(dtype=np.float32)
print(f"two passes, float32: var = {np.mean((row - mean) ** 2, dtype=np.float32):.6f}")
print(f"E[x^2] - E[x]^2, float32: var = {np.mean(row * row, dtype=np.float32) - mean * mean:.6f}")
print(f"float64, exact enough: var = {row.astype(np.float64).var():.6f}")

# %% [markdown]
# (Welford's algorithm updates the mean and the sum of squared distances together, one
# element or one block at a time, and is as precise as two passes in one; two passes are
# simpler, and the second one re-reads a row the first just brought into the cache.)
#
# Two more rules:
#
# - **Compute in `float32`.** A row of 4096 `float16` values summed in `float16` keeps
#   about three significant digits, and `bfloat16` two; the square of a `float16` value
#   above 256 is past 65504, its largest number, so `inf` (the checks have such rows).
#   Convert every load with `.to(tl.float32)`, compute, and convert only the result, in the store:
#   `tl.store(y_ptr + ..., y.to(y_ptr.dtype.element_ty), mask=...)`. (This is what real
#   kernels do, and on a CPU it is also required: Triton 3.9's interpreter computes
#   `bfloat16` arithmetic wrongly.)
# - **`eps` goes inside the square root**: `rstd = 1 / tl.sqrt(var + eps)`. A constant row
#   has variance 0 and distances 0; `1 / sqrt(0 + eps)` times 0 gives 0, so `y` is the bias.
#   `1 / sqrt(var) + eps` gives `0 * inf = NaN`, and for rows of tiny variance it scales
#   by `1 / sqrt(var)` where torch scales by about `1 / sqrt(eps)`.

# %% [markdown]
# ## 2. LayerNorm, one program per row
#
# Write `layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK)` for a contiguous `x`
# (`M x N`, row `r` starts at `x_ptr + r * N`), one program per row, and
# `triton_layer_norm(x, weight, bias, eps, block)`, which launches it on tensors and returns
# `y` in `x`'s dtype.
#
# - Three loops over the row, `for start in range(0, N, BLOCK)`, with
#   `cols = start + tl.arange(0, BLOCK)` and `mask = cols < N`: the mean, then the variance
#   about it, then `y`. Accumulate into a `tl.zeros([BLOCK], dtype=tl.float32)` vector and
#   reduce it with `tl.sum(acc, axis=0)` after the loop.
# - `tl.load(..., mask=mask, other=0.0)` keeps the loads of the last block inside the row,
#   and its zeros add nothing to a sum. But in the variance pass a padded column would add
#   $(0 - \mu)^2$: zero its distance with `tl.where(mask, x - mean, 0.0)`.
# - `BLOCK` is a `tl.constexpr` (a power of two, the compiler needs it to shape the block):
#   pass `BLOCK=block`. The grid is `(M,)`; with `M = 0` there is nothing to launch.
#
# `layer_norm`, below, is what the checks call: numpy arrays in (values of `dtype`, carried
# as `float32`), a numpy `float32` array out.

# %% tags=["solution"]
@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, N, eps, BLOCK: tl.constexpr):
    """y[row] = (x[row] - mean) / sqrt(var + eps) * w + b: two passes for the statistics, in float32."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)  # a padded column would add (0 - mean)^2
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def triton_layer_norm(x, weight, bias, eps=1e-5, block=1024):
    """LayerNorm of each row of x (M, N) with weight and bias (N,), tensors on DEVICE; y has x's dtype."""
    ### BEGIN SOLUTION
    M, N = x.shape
    y = torch.empty_like(x)
    if M:
        layer_norm_kernel[(M,)](x, y, weight, bias, N, eps, BLOCK=block)
    return y
    ### END SOLUTION


# %%
def layer_norm(x, weight, bias, eps=1e-5, dtype="fp32", block=1024):
    """What the checks call: numpy in (values of `dtype`), numpy out in `dtype` (bf16 as float32)."""
    x, weight, bias = (to_device(a, dtype) for a in (x, weight, bias))
    return to_numpy(triton_layer_norm(x, weight, bias, eps, block))


# %% tags=["check"]
check("layer_norm")
### BEGIN HIDDEN TESTS
check("layer_norm", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The hidden cases include rows of 1, 7, 1000 and 5000 columns, with blocks smaller and
# larger than the row, a single row, no rows, and `float16` and `bfloat16` data. Next, the
# rows where `eps` decides the answer: constant rows, and rows whose variance is below
# `eps` (here $4 \cdot 10^{-6}$ against $10^{-5}$).

# %%
flat = np.stack([np.full(10, 0.3), 0.1 + 2e-3 * rng.standard_normal(10)]).astype(np.float32)
ones, zeros = np.ones(10, np.float32), np.zeros(10, np.float32)
print(layer_norm(flat, ones, zeros, eps=1e-5))
print(F.layer_norm(torch.from_numpy(flat).double(), (10,), eps=1e-5).numpy())

# %% tags=["check"]
check("layer_norm_flat_rows")
### BEGIN HIDDEN TESTS
check("layer_norm_flat_rows", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# And rows around $10^4$ with a spread of 1, compared with `float64`. A `float32` number
# near $10^4$ is only known to about $10^{-3}$, so even a perfect `float32` kernel is off by
# about that much; the check allows $10^{-2}$. The one-pass formula is off by 1 to 1000.

# %% tags=["check"]
check("layer_norm_large_mean")
### BEGIN HIDDEN TESTS
check("layer_norm_large_mean", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. RMSNorm
#
# Write `rms_norm_kernel(x_ptr, y_ptr, w_ptr, N, eps, BLOCK)` and
# `triton_rms_norm(x, weight, eps, block)`: $y_j = x_j \cdot \mathrm{rsqrt}(\frac{1}{N}
# \sum_k x_k^2 + \varepsilon) \cdot w_j$, with no mean subtracted anywhere (that is the
# point of RMSNorm: one statistic, one pass fewer). It is
# `torch.nn.functional.rms_norm(x, (N,), weight, eps)`. Two loops: the sum of squares (the
# padded zeros add $0^2$), then `y`.

# %% tags=["solution"]
@triton.jit
def rms_norm_kernel(x_ptr, y_ptr, w_ptr, N, eps, BLOCK: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, in float32."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def triton_rms_norm(x, weight, eps=1e-6, block=1024):
    """RMSNorm of each row of x (M, N) with weight (N,), tensors on DEVICE; y has x's dtype."""
    ### BEGIN SOLUTION
    M, N = x.shape
    y = torch.empty_like(x)
    if M:
        rms_norm_kernel[(M,)](x, y, weight, N, eps, BLOCK=block)
    return y
    ### END SOLUTION


# %%
def rms_norm(x, weight, eps=1e-6, dtype="fp32", block=1024):
    """What the checks call: numpy in (values of `dtype`), numpy out in `dtype` (bf16 as float32)."""
    x, weight = to_device(x, dtype), to_device(weight, dtype)
    return to_numpy(triton_rms_norm(x, weight, eps, block))


# %% tags=["check"]
check("rms_norm")
### BEGIN HIDDEN TESTS
check("rms_norm", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. On a GPU
#
# On a machine with an NVIDIA GPU the cell below times your LayerNorm against
# `torch.nn.functional.layer_norm` with `aisys.bench` (CUDA events, an L2 flush between
# repetitions) and reports the bandwidth as a fraction of the device's. Both read `x` and
# write `y` once, so a good kernel is as fast as torch's; on a CPU it only says so.
#
# Your kernel reads `x` three times: the second and third passes find the row in the cache
# when it is small enough. The reference in `aisys.triton_kernels.layernorm` goes further
# for rows that fit in one block: it loads the row once into registers and computes both
# statistics and `y` from there.

# %%
if DEVICE == "cuda":
    from aisys import bench

    def norm_inputs(shape):
        M, N = shape
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        return x, torch.rand(N, device="cuda", dtype=x.dtype), torch.randn(N, device="cuda", dtype=x.dtype)

    yours = bench.Benchmark(
        "layer_norm (yours)", lambda x, w, b: triton_layer_norm(x, w, b, 1e-5, 4096),
        lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, 1e-5), make_inputs=norm_inputs)
    print(bench.table(bench.measure([yours], sizes=[(4096, 4096), (4096, 8192)])))
else:
    print("no GPU here: the kernels ran in Triton's interpreter, which says nothing about speed")


# %% [markdown]
# ## 5. Graded speed (on a GPU)
#
# Where the grader has a GPU, two more checks time your `triton_layer_norm` (its default
# `block`) on an 8192 x 8192 float32 matrix: 1 point if it moves its bytes (x read once, y
# written once) at 20% or more of the GPU's copy bandwidth, 1 more at 35% or more. The kernel
# of part 2 reaches about 48% on an H200; the same statistics computed with torch ops, about
# 10%.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with a copy of as
# many bytes, measured in the same run. Without a GPU both checks are skipped, and the notebook
# is graded without their points.

# %% tags=["check"]
check("layer_norm_speed")
### BEGIN HIDDEN TESTS
check("layer_norm_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("layer_norm_near_copy_speed")
### BEGIN HIDDEN TESTS
check("layer_norm_near_copy_speed", hidden=True)
### END HIDDEN TESTS
