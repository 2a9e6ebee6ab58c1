# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a row-wise softmax kernel in Triton
#
# **You will learn** to write the fused softmax an interviewer asks for in Triton, with its launch:
# one program per row loads the whole row into one block, subtracts the row's maximum (so that `exp`
# cannot overflow), divides by the sum, and stores the row once: one read and one write of memory.
#
# **The conventions, all of them:**
# - `softmax(x)` takes a numpy `float32` matrix `x` of shape `(rows, cols)` and returns
#   $y_{ij} = e^{x_{ij}} / \sum_k e^{x_{ik}}$ over each row, as a numpy `float32` matrix of the same
#   shape; a matrix with no rows or no columns gives an empty result of its shape, without a launch;
# - `softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK)`, a `@triton.jit`
#   kernel: program `row` (`tl.program_id(0)`) computes row `row`, which starts at
#   `x_ptr + row * x_row_stride` (the stride is `x.stride(0)`, the elements from one row to the
#   next); its output row starts at `out_ptr + row * out_row_stride`;
# - the launch: a grid of `(rows,)` programs, `BLOCK = triton.next_power_of_2(cols)` (a
#   `tl.constexpr`), so the last `BLOCK - cols` lanes are padding: load with
#   `mask=offs < n_cols, other=float("-inf")` (padding must neither win the max nor add to the sum:
#   $e^{-\infty} = 0$) and store with the same mask;
# - compute in float32: `m = max`, `e = exp(x - m)`, `e / sum(e)`. Entries of $-\infty$ give 0;
#   a row of **only** $-\infty$ gives NaN in every entry, as `torch.softmax` does (it comes out of
#   the formula: $-\infty - (-\infty)$ is NaN);
# - results are compared with `torch.softmax` in float64 with `rtol = 1e-5`, `atol = 1e-7`;
# - write it with `tl.load`, `tl.max`, `tl.exp`, `tl.sum`, `tl.store`: not `tl.softmax` or
#   `torch.softmax` (the checks cannot tell `tl.softmax` apart: the drill forbids it). The grader
#   counts what your launch reads and writes in Triton's interpreter: each element once.
#
# On a CPU the kernel runs in Triton's interpreter, one program after the other: the checks use at
# most a few hundred rows of up to 1000 columns. The hidden cases probe one column, 127, 128 and 129
# columns, one row, empty matrices, rows near $\pm 10^4$ (where `exp` overflows or every term
# underflows without the max), scattered and leading $-\infty$, a row of only $-\infty$, and small
# matrices drawn at random (the smallest failing one is shown).

# %%
import warnings

import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on the device, and back
from aisys_grader import checker

check = checker("09-drills/softmax_triton", globals())
# The interpreter computes with numpy, which warns where -inf - (-inf) gives NaN (a row of only -inf).
warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning, module="triton")

# %% tags=["solution"]
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Row `row` of out = softmax of row `row` of x, the whole row in one block of BLOCK >= n_cols lanes."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)  # every exponent <= 0: no overflow; padding gives exp(-inf) = 0
    d = tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, e / d, mask=mask)
    ### END SOLUTION


def softmax(x):
    """The softmax of each row of the float32 matrix x: one program per row."""
    ### BEGIN SOLUTION
    t = to_device(x, "fp32")
    rows, cols = t.shape
    out = torch.empty_like(t)
    if rows and cols:
        softmax_kernel[(rows,)](t, out, cols, t.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(cols))
    return to_numpy(out)
    ### END SOLUTION


# %%
example = np.array([[1, 2, 3, 4], [1e4, 1e4 - 1, -np.inf, 0], [-np.inf] * 4], np.float32)
print(softmax(example))
print(torch.softmax(torch.from_numpy(example), dim=1).numpy())

# %% tags=["check"]
check("softmax")
### BEGIN HIDDEN TESTS
check("softmax", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_stable")
### BEGIN HIDDEN TESTS
check("softmax_stable", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("softmax_one_pass")
### BEGIN HIDDEN TESTS
check("softmax_one_pass", hidden=True)
### END HIDDEN TESTS
