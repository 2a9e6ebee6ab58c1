# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: sum and maximum in Triton
#
# **You will learn** how a Triton program reduces a whole block with one `tl.sum` or
# `tl.max`, why a masked load must fill its empty lanes with the **identity** of the
# operation (0 for a sum, $-\infty$ for a maximum), how many programs and a second pass
# reduce a vector of any length, and how one program loops over a row longer than its block.
#
# In Triton you write what one **program** does with a **block** of elements; the compiler
# spreads the block over the threads of a CUDA block and writes the shuffles and shared
# memory of part 1 for you. Program `pid = tl.program_id(0)` of a launch
# `kernel[(programs,)](...)` loads `BLOCK` elements at once:
#
# ```python
# offs = pid * BLOCK + tl.arange(0, BLOCK)      # BLOCK offsets; BLOCK is a tl.constexpr
# x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
# total = tl.sum(x, axis=0)                     # a tree across the lanes, done by the compiler
# ```
#
# `BLOCK` must be a power of two known when the kernel compiles (`tl.constexpr`), so the last
# block of an array of `n` elements is usually partial. The **mask** keeps its loads in bounds,
# and `other=` is what the masked lanes hold. For a sum that is 0; for a maximum it must be
# $-\infty$: with 0, the maximum of a row of negative numbers comes out 0. (Without the mask,
# a GPU reads or writes whatever lies past the tensor; here, where importing `aisys.tensors`
# makes the interpreter check every address, the launch stops with an `IndexError` naming the
# kernel's line.)
#
# On a CPU the kernels run in Triton's **interpreter** (`TRITON_INTERPRET=1`, set before
# `triton` is imported), which executes each program in turn with numpy: about half a
# millisecond a program, so keep launches to a few hundred programs here. On a machine with an
# NVIDIA GPU the same code compiles and runs there. The functions take numpy arrays and a
# dtype name (`"fp32"`, `"fp16"` or `"bf16"`; numpy has no bfloat16, so bf16 data arrives as
# `float32` holding bf16 values), load that dtype, **compute in float32**, and return numpy
# arrays or numbers. Write the kernels yourself: when grading, the reference
# `aisys.triton_kernels` cannot be imported.

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import TORCH_DTYPES, to_device, to_numpy  # numpy arrays to tensors on DEVICE, and back
from aisys_grader import checker

check = checker("02-gpu-programming/triton_reduction", globals())

DEVICE = device.current()
print(device.describe())

BLOCK = 128  # elements a program loads at once; small, for the interpreter's sake


# %% [markdown]
# ## 1. One block per program, then a pass over the partial results
#
# Write `block_sum_kernel(x_ptr, out_ptr, n, BLOCK)`: program `pid` stores the sum of
# `x[pid * BLOCK : (pid + 1) * BLOCK]` (elements past `n` count as nothing) into `out[pid]`,
# in float32. Load, then convert with `.to(tl.float32)` before adding: float16 and bfloat16
# data are summed in float32, as `torch.sum` does, and Triton's interpreter computes wrong
# answers on bfloat16 directly (it stores bf16 as raw 16-bit integers). `block_max_kernel`
# does the same with the maximum.
#
# A launch of `ceil(n / BLOCK)` programs leaves that many partial results. Run the same kernel
# again on them, and again, until one value is left: `reduce_passes(t, kernel)` does that for
# a tensor `t` of at least one element and returns a one-element float32 tensor. (With
# `BLOCK = 128`, 1000 elements take two passes: 8 programs, then 1.)
#
# Then `vector_sum(x, dtype)` and `vector_max(x, dtype)` return the result as a Python
# number rounded to the data's dtype (`result.to(TORCH_DTYPES[dtype]).item()`). The sum of no
# elements is `0.0`; the maximum of no elements is undefined: raise `ValueError` (torch raises
# too). The passes give the same bits every run; one pass in which every program adds its
# partial sum into a single number with `tl.atomic_add` would add them in whatever order the
# programs finish, and a float sum would change from run to run.

# %% tags=["solution"]
@triton.jit
def block_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[pid] = x[pid * BLOCK] + ... + x[pid * BLOCK + BLOCK - 1], the elements past n counting as 0, in float32."""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # 0: the identity of +
    tl.store(out_ptr + pid, tl.sum(x.to(tl.float32), axis=0))
    ### END SOLUTION


@triton.jit
def block_max_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[pid] = the largest of x[pid * BLOCK : (pid + 1) * BLOCK], the elements past n ignored, in float32."""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=float("-inf"))  # -inf: the identity of max
    tl.store(out_ptr + pid, tl.max(x.to(tl.float32), axis=0))
    ### END SOLUTION


def reduce_passes(t, kernel):
    """Launch `kernel` (one of the two above) pass after pass until one value is left; a 1-element float32 tensor."""
    ### BEGIN SOLUTION
    while t.numel() > 1:
        programs = triton.cdiv(t.numel(), BLOCK)
        partial = torch.empty(programs, dtype=torch.float32, device=t.device)
        kernel[(programs,)](t, partial, t.numel(), BLOCK=BLOCK)
        t = partial
    return t.float()  # a 1-element input needs no pass
    ### END SOLUTION


def vector_sum(x, dtype):
    """The sum of the vector x, holding `dtype` data, as a number rounded to that dtype; 0.0 for no elements."""
    ### BEGIN SOLUTION
    t = to_device(x, dtype)
    if t.numel() == 0:
        return 0.0
    return reduce_passes(t, block_sum_kernel).to(TORCH_DTYPES[dtype]).item()
    ### END SOLUTION


def vector_max(x, dtype):
    """The largest element of the vector x, holding `dtype` data; ValueError for no elements."""
    ### BEGIN SOLUTION
    t = to_device(x, dtype)
    if t.numel() == 0:
        raise ValueError("x must have at least one element: the maximum of no elements is undefined")
    return reduce_passes(t, block_max_kernel).to(TORCH_DTYPES[dtype]).item()
    ### END SOLUTION


# %% [markdown]
# Try them on a vector two passes long. The maximum of negative numbers is a good test of
# `other=`:

# %%
example = np.random.default_rng(0).random(1000, dtype=np.float32)
print(vector_sum(example, "fp32"), example.sum(dtype=np.float64))
print(vector_max(-1 - example, "fp32"), (-1 - example).max())

# %% tags=["check"]
check("vector_sum")
### BEGIN HIDDEN TESTS
check("vector_sum", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("vector_max")
### BEGIN HIDDEN TESTS
check("vector_max", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. One program per row, looping over the row
#
# A row reduction of a `(rows, cols)` matrix gives each row its own program. A row can be
# longer than any block you would compile, so the program walks along it, `BLOCK` columns at
# a time, and keeps one **accumulator per lane**:
#
# ```python
# acc = tl.zeros([BLOCK], tl.float32)
# for col in range(0, n_cols, BLOCK):           # ceil(n_cols / BLOCK) steps; the last may be partial
#     offs = col + tl.arange(0, BLOCK)
#     acc += tl.load(row_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
# total = tl.sum(acc, axis=0)                   # across the lanes once, at the end
# ```
#
# Adding lane by lane in the loop and across lanes once at the end saves a cross-lane
# reduction (shuffles, shared memory and a barrier on a GPU) at every step. Row `r` starts at
# `a_ptr + r * row_stride`: pass `a.stride(0)`, the elements from one row to the next.
#
# Write `row_sum_kernel` and `row_max_kernel` (stores in the output's dtype:
# `.to(out_ptr.dtype.element_ty)`), and `row_sums(a, dtype)` and `row_max(a, dtype)`, which
# return numpy arrays of shape `(rows,)` in the data's dtype (`to_numpy`). A matrix with no
# rows gives an empty array; with no columns, `row_sums` gives zeros and `row_max` raises
# `ValueError`. Launch no kernel on an empty matrix. (The interpreter rounds float32 to
# bfloat16 toward zero where a GPU rounds to nearest; the checks allow the one unit in the
# last place that costs.)

# %% tags=["solution"]
@triton.jit
def row_sum_kernel(a_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    """out[r] = the sum of row r of a (n_cols elements starting at a_ptr + r * row_stride), one program per row."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    row_ptr = a_ptr + row * row_stride
    acc = tl.zeros([BLOCK], tl.float32)
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        acc += tl.load(row_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
    ### END SOLUTION


@triton.jit
def row_max_kernel(a_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    """out[r] = the largest element of row r of a, one program per row."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    row_ptr = a_ptr + row * row_stride
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + offs, mask=offs < n_cols, other=float("-inf"))
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(out_ptr + row, tl.max(acc, axis=0).to(out_ptr.dtype.element_ty))
    ### END SOLUTION


def row_sums(a, dtype):
    """The sum of each row of the matrix a, holding `dtype` data: a numpy array of shape (rows,)."""
    ### BEGIN SOLUTION
    t = to_device(a, dtype)
    rows, cols = t.shape
    out = torch.zeros(rows, dtype=t.dtype, device=t.device)
    if rows and cols:
        row_sum_kernel[(rows,)](t, out, cols, t.stride(0), BLOCK=BLOCK)
    return to_numpy(out)
    ### END SOLUTION


def row_max(a, dtype):
    """The largest element of each row of the matrix a: a numpy array of shape (rows,); ValueError for no columns."""
    ### BEGIN SOLUTION
    t = to_device(a, dtype)
    rows, cols = t.shape
    out = torch.empty(rows, dtype=t.dtype, device=t.device)
    if rows and not cols:
        raise ValueError(f"a must have at least one column: the maximum of an empty row is undefined "
                         f"(a has shape {tuple(t.shape)})")
    if rows:
        row_max_kernel[(rows,)](t, out, cols, t.stride(0), BLOCK=BLOCK)
    return to_numpy(out)
    ### END SOLUTION


# %%
matrix = np.random.default_rng(1).standard_normal((3, 1000)).astype(np.float32)
print(row_sums(matrix, "fp32"), matrix.sum(axis=1))
print(row_max(matrix, "fp16"), matrix.astype(np.float16).max(axis=1))

# %% tags=["check"]
check("row_sums")
### BEGIN HIDDEN TESTS
check("row_sums", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("row_max")
### BEGIN HIDDEN TESTS
check("row_max", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Nothing to reduce
#
# The sum of nothing is 0, the identity of addition. The maximum of nothing has no value
# ($-\infty$ is the identity of max, but returning it would hide a bug upstream): raise.
# This check calls your four functions on empty vectors and on matrices with no rows or no
# columns, in every dtype.

# %% tags=["check"]
check("empty_inputs")
### BEGIN HIDDEN TESTS
check("empty_inputs", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# And the shape of `vector_sum`: the grader runs it again in Triton's interpreter, on 8195
# elements, and counts its launches. The first pass must spread over many programs (one program
# looping over the whole vector leaves every other multiprocessor idle), and no partial sum may
# be added with `tl.atomic_add`.

# %% tags=["check"]
check("vector_sum_passes")
### BEGIN HIDDEN TESTS
check("vector_sum_passes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Fast on a GPU
#
# Your `vector_sum` is right, but on an H100 it would leave most of the memory bandwidth
# unused: each program loads one block, reduces it across lanes, stores one number and exits,
# and the first pass writes $n / 128$ partial results that the next pass reads again. The
# reference `aisys.triton_kernels.reduction` (see the chapter's benchmark page) changes three
# things, none of which changes the result:
#
# - **Few programs, many blocks each.** Pass 1 launches 4 programs per multiprocessor (528 on
#   an H100), all resident at once; each walks a contiguous chunk of the vector, so the second
#   pass has only a few hundred numbers to add.
# - **One accumulator per lane**, as in your row kernels: `acc += x` in the loop, one `tl.sum`
#   at the end of the program.
# - **Big blocks**: `BLOCK = 4096` with `num_warps=8` (a launch option, like the grid) gives
#   each thread 16 float32 per step, four 16-byte loads in flight at once.
#
# The row kernels pick `BLOCK = min(4096, next_power_of_2(cols))`, so a short row wastes no
# lanes. On 2**28 float32 elements the reference is benchmarked against `torch.sum`: the
# target is at least 0.95 of its bandwidth.


# %% [markdown]
# ## 5. Graded speed (on a GPU)
#
# Where the grader has a GPU, two more checks time your `vector_sum` on 2**28 float32 elements:
# 1 point if it reads them at 6% or more of the GPU's copy bandwidth, 1 more at 12% or more.
# The passes of part 1, one block of 128 per program, reach about 19% on an H200; a launch per
# slice of the vector, about 2%.
#
# The grader passes the data already on the GPU (`to_device` uses it as it is, and `to_numpy`
# leaves the result there while it is timed) and times many repetitions, each on fresh random
# inputs made on the GPU, with more than the L2 cache holds between a repetition's inputs and
# its kernel. Every repetition's result is checked, and its time is compared with a copy of as
# many bytes, measured in the same run. Without a GPU both checks are skipped, and the notebook
# is graded without their points.

# %% tags=["check"]
check("vector_sum_speed")
### BEGIN HIDDEN TESTS
check("vector_sum_speed", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("vector_sum_near_copy_speed")
### BEGIN HIDDEN TESTS
check("vector_sum_near_copy_speed", hidden=True)
### END HIDDEN TESTS
