# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a numerically stable softmax in Triton, fused and online
#
# **You will learn** why softmax subtracts the row's maximum before `exp`, how one Triton
# program computes a whole row in registers (one read and one write of memory, where
# separate torch ops make several passes), what a masked load must pad with, and how the
# **online** softmax handles rows longer than a block in one pass by rescaling its running
# sum whenever the maximum grows: the trick at the heart of FlashAttention.
#
# The softmax of a row $x$ is $y_j = e^{x_j} / \sum_k e^{x_k}$. Computed as written, it
# overflows: $e^{x} = \infty$ in float32 once $x > 88.7$ (float16 data computed in float32 too),
# and $\infty / \infty$ is NaN; at $x < -104$ every $e^{x}$ is 0 and $0 / 0$ is NaN. Because
# $e^{x_j - m} / \sum_k e^{x_k - m}$ is the same number for any $m$, take $m = \max_k x_k$:
# every exponent is then $\le 0$, every term lies in $[0, 1]$, the largest is exactly 1, and
# the sum is at least 1. Inputs of $\pm 10^4$, which attention scores and logits can reach,
# are then harmless.
#
# Entries of $-\infty$ are common: a causal mask sets the scores of future tokens to $-\infty$
# so that their weight is $e^{-\infty} = 0$. A row of **only** $-\infty$ has no finite
# maximum; `torch.softmax` returns NaN for it, and so must you (it comes out of the formula
# by itself: $-\infty - (-\infty)$ is NaN).
#
# The kernels run in Triton's interpreter on a CPU (a few hundred programs at most here) and
# compiled on an NVIDIA GPU. The functions take a numpy matrix and a dtype name (`"fp32"`,
# `"fp16"` or `"bf16"`; bf16 data arrives as `float32` holding bf16 values), load that dtype,
# **compute in float32**, and return a numpy matrix of the same shape in that dtype (bf16 as
# float32). Write the kernels yourself: when grading, the reference `aisys.triton_kernels`
# cannot be imported.

# %%
import warnings

import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("02-gpu-programming/triton_softmax", globals())

DEVICE = device.current()
print(device.describe())
# The interpreter computes with numpy, which warns where -inf - (-inf) gives NaN (a row of only -inf);
# a GPU computes the same NaN silently.
warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning, module="triton")



# %% [markdown]
# ## 1. Fused: one program, one row, one block
#
# Write `softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK)`:
# program `row` loads its whole row as one block of `BLOCK` lanes (`BLOCK` is
# `triton.next_power_of_2(n_cols)`, a `tl.constexpr`, so the last lanes are padding), computes
# the maximum, `e = tl.exp(x - m)`, the sum `d` of `e`, and stores `e / d` in the output's
# dtype (`.to(out_ptr.dtype.element_ty)`), masked.
#
# What do the padding lanes hold? They must not win the maximum and must add nothing to the
# sum: `other=float("-inf")` does both, since $e^{-\infty - m} = 0$. (Padding with 0 would add
# $e^{-m}$ per padding lane to the sum, and would be the maximum of a row of negative numbers.)
# Row `row` starts at `x_ptr + row * x_row_stride`: pass `x.stride(0)`, the elements from
# one row to the next, not `x.stride(1)`.
#
# `softmax_rows(x, dtype)` launches one program per row and returns the result with
# `to_numpy`; for a matrix with no rows or no columns it returns an empty result of the same
# shape without a launch. (Convert each load with `.to(tl.float32)`: Triton's interpreter
# computes wrong answers on bfloat16 directly. It also rounds float32 to bfloat16 toward zero
# where a GPU rounds to nearest; the checks allow the one unit in the last place that costs.)

# %% tags=["solution"]
@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Row `row` of out = softmax of row `row` of x (n_cols <= BLOCK elements), one program per row."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)  # every exponent <= 0: no overflow; padding gives exp(-inf) = 0
    d = tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, (e / d).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax_rows(x, dtype):
    """The softmax of each row of the matrix x, holding `dtype` data: a numpy array of x's shape."""
    ### BEGIN SOLUTION
    t = to_device(x, dtype)
    rows, cols = t.shape
    out = torch.empty_like(t)
    if rows and cols:
        block = triton.next_power_of_2(cols)
        softmax_row_kernel[(rows,)](t, out, cols, t.stride(0), out.stride(0), BLOCK=block)
    return to_numpy(out)
    ### END SOLUTION


# %% [markdown]
# Compare with torch on rows of ordinary numbers, then on rows that would overflow without
# the subtraction:

# %%
example = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
print(np.abs(softmax_rows(example, "fp32") - torch.softmax(torch.from_numpy(example), dim=1).numpy()).max())
large = np.array([[1e4, 1e4 - 1, 1e4 - 2], [-1e4, -1e4 - 1, -np.inf], [-np.inf, -np.inf, -np.inf]], np.float32)
print(softmax_rows(large, "fp32"))

# %% tags=["check"]
check("softmax_rows")
### BEGIN HIDDEN TESTS
check("softmax_rows", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_rows_stable")
### BEGIN HIDDEN TESTS
check("softmax_rows_stable", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Online: rows longer than a block
#
# A row of 100 000 elements does not fit a block: a block lives in registers, and past a few
# tens of thousands of float32 per program the compiler spills to memory. The program must
# walk the row in blocks of `BLOCK` elements, and softmax needs the maximum before it can sum.
# Three passes (max, sum, write) read the row three times. The **online softmax** (Milakov and
# Gimelshein, 2018) finds the maximum and the sum in **one** pass, keeping a running maximum
# `m` and a running sum `d` of `exp(x - m)`. When a block raises the maximum from `m` to
# `m_new`, every term already in `d` was taken against the old maximum, and
# $e^{x - m} = e^{x - m_{new}} \cdot e^{m_{new} - m}$, so the old sum is **rescaled**:
#
# ```
# m, d = -inf, 0
# for each block b of the row:
#     m_new = max(m, max(b))
#     d = d * exp(m - m_new) + sum(exp(b - m_new))
#     m = m_new
# then, for each block b:  out = exp(b - m) / d
# ```
#
# Two reads and one write, for any row length. One case needs care: while every entry seen so
# far is $-\infty$ (a causal mask's leading run, longer than a block), `m` and `m_new` are both
# $-\infty$ and `exp(m - m_new)` is $e^{\text{NaN}}$, which poisons `d` for the rest of the
# row. Put a finite number in place of `m_new` in the two `exp`s then (0 does:
# `m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)`): the old terms and the block's
# give $e^{-\infty} = 0$, as they should.
#
# Write `softmax_online_kernel` (same arguments as the fused kernel; here `BLOCK` is the block
# you are given, not the row's length; keep `m` and `d` as float32 scalars:
# `tl.full([], float("-inf"), tl.float32)` and `tl.zeros([], tl.float32)`) and
# `softmax_online(x, block, dtype)`, with `block` a power of two. A row of only $-\infty$
# still gives NaN, as torch does.

# %% tags=["solution"]
@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Row `row` of out = softmax of row `row` of x, for any n_cols: an online pass for max and sum, one to write."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    m = tl.full([], float("-inf"), tl.float32)
    d = tl.zeros([], tl.float32)
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: exp(-inf - 0) = 0, not NaN
        d = d * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + offs, (tl.exp(x - m) / d).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax_online(x, block, dtype):
    """The softmax of each row of the matrix x, each row read in blocks of `block` elements (a power of two)."""
    ### BEGIN SOLUTION
    t = to_device(x, dtype)
    rows, cols = t.shape
    out = torch.empty_like(t)
    if rows and cols:
        softmax_online_kernel[(rows,)](t, out, cols, t.stride(0), out.stride(0), BLOCK=block)
    return to_numpy(out)
    ### END SOLUTION


# %% [markdown]
# A row of 5000 in blocks of 128, whose maximum keeps growing (so `d` is rescaled at almost
# every block), and one whose first 1000 entries are $-\infty$:

# %%
rising = np.linspace(-50, 50, 10_000, dtype=np.float32).reshape(2, 5000)
rising[1, :1000] = -np.inf
expected = torch.softmax(torch.from_numpy(rising).double(), dim=1).numpy()
print(np.abs(softmax_online(rising, 128, "fp32") - expected).max())

# %% tags=["check"]
check("softmax_online")
### BEGIN HIDDEN TESTS
check("softmax_online", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_online_stable")
### BEGIN HIDDEN TESTS
check("softmax_online_stable", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The point of both kernels is what they read. The grader runs `softmax_rows` and
# `softmax_online(x, 128, "fp32")` again in Triton's interpreter, on a 2 x 1000 matrix, and
# counts the elements their loads and stores touch: the fused kernel must read and write each
# element once, the online one read it at most twice (three passes, max then sum then write,
# read it three times) in blocks of at most `block` elements.

# %% tags=["check"]
check("softmax_passes")
### BEGIN HIDDEN TESTS
check("softmax_passes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. On a GPU
#
# Softmax moves $2 \cdot rows \cdot cols$ elements (one read, one write) and does a handful of
# operations per element: it is bound by memory bandwidth. The fused kernel reads and writes
# each element once, with the row in registers; `torch.softmax` is a fused kernel too, so the
# target on an H100 is to match it for rows of 4096 to 16384 elements. The reference
# `aisys.triton_kernels.softmax` is your fused kernel with `num_warps` chosen from the block
# (4 up to 1024 lanes, 8 up to 4096, 16 beyond: 8 to 32 elements per thread), and the online
# kernel, in blocks of 4096, for rows longer than 16384. The online kernel reads each row
# twice, so it costs about 3/2 of the fused one where both apply; FlashAttention uses the same
# rescaling to avoid writing the attention matrix at all (chapter 7).


# %% [markdown]
# ## 4. Graded speed (on a GPU)
#
# Where the grader has a GPU, two more checks time your `softmax_rows` on a 16384 x 4096
# float32 matrix: 1 point if it moves its bytes (each element read once and written once) at
# 40% or more of the GPU's copy bandwidth, 1 more at 70% or more. The fused kernel above
# reaches about 95% on an H200; separate torch ops, which read and write the matrix again for
# each step, about 20%.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with a copy of as
# many bytes, measured in the same run. Without a GPU both checks are skipped, and the notebook
# is graded without their points.

# %% tags=["check"]
check("softmax_rows_speed")
### BEGIN HIDDEN TESTS
check("softmax_rows_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_rows_near_copy_speed")
### BEGIN HIDDEN TESTS
check("softmax_rows_near_copy_speed", hidden=True)
### END HIDDEN TESTS
