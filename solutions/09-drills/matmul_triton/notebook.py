# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a tiled matmul kernel in Triton
#
# **You will learn** to write the tiled matrix multiplication an interviewer asks for in Triton: one
# program per tile of $C$, a loop over $K$ that multiplies a tile of $A$ by a tile of $B$ with
# `tl.dot` (the Tensor Cores' instruction on a GPU) into a **float32** accumulator, masks for sizes
# that are not multiples of the tile, and strides, so that a transposed $B$ (a linear layer's
# weight, stored `(out_features, in_features)`) needs no copy.
#
# **The conventions, all of them:**
# - `matmul(a, b, transpose_b)` takes numpy **float16** matrices: `a` of shape `(M, K)` and, when
#   `transpose_b` is False, `b` of shape `(K, N)`, giving $C = A B$; when `transpose_b` is True,
#   `b` has shape `(N, K)` and holds $B^T$, giving $C = A\,b^T$. $M, N, K \ge 1$. It returns $C$,
#   `(M, N)`, as a numpy **float16** matrix;
# - tiles: `BLOCK_M = BLOCK_N = 32`, `BLOCK_K = 16` (given below, `tl.constexpr` arguments);
# - `matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
#   stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)`: element $(i, k)$ of $A$ is at
#   `a_ptr + i * stride_am + k * stride_ak`, element $(k, j)$ of $B$ at
#   `b_ptr + k * stride_bk + j * stride_bn`, and $C$ likewise;
# - the launch: a grid of `(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))` programs; program
#   `(pid_m, pid_n) = (tl.program_id(0), tl.program_id(1))` computes the tile of rows
#   `pid_m * BLOCK_M + tl.arange(0, BLOCK_M)` and columns `pid_n * BLOCK_N + tl.arange(0, BLOCK_N)`;
# - a transposed $B$ is passed as it is, not copied: $B$ is the view `b.T` of the `(N, K)` tensor,
#   so `stride_bk = b.stride(1)` and `stride_bn = b.stride(0)` (pass the strides of the view);
# - the accumulator is float32 (`tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`), updated with
#   `acc = tl.dot(a_tile, b_tile, acc)` once per step of `BLOCK_K`, and rounded to float16 once, at
#   the store;
# - masks: loads past row $M$, column $N$ or, in the last step, past $K$ read 0 (`other=0.0`);
#   the store skips rows past $M$ and columns past $N$. (In Triton's interpreter every access
#   outside a tensor is an error that names the kernel's line);
# - results are compared with the float64 product of the float16 inputs, rounded to float16:
#   within one float16 unit in the last place (`rtol = 2**-10`) plus `atol = K * 2**-23 *
#   max(|A| |B|)`, the float32 sum's worst case;
# - the grader also counts your launch in Triton's interpreter, on a 40 x 40 x 64 product: one
#   program per tile, every multiply-add in `tl.dot`, and each program reading its row panel of
#   $A$ and column panel of $B$ once.
#
# On a CPU the kernel runs in Triton's interpreter, one program after the other: the checks keep
# $M$ and $N$ to about a hundred at most, and $K$ to 2000. The hidden cases probe 1 x 1 x 1, sizes one
# below, at and one above a tile, $K = 1$, a single row or column, both layouts, a float16 sum that
# would pass 65504 halfway along $K$ (the product itself fits), a long $K$ of positive numbers, and
# small shapes drawn at random (the smallest failing one is shown).

# %%
import numpy as np

from aisys import device

device.use_triton_interpreter()  # before triton is imported: on a CPU, Triton runs in its interpreter

import torch
import triton
import triton.language as tl

from aisys.tensors import to_device, to_numpy  # numpy arrays to tensors on the device, and back
from aisys_grader import checker

check = checker("09-drills/matmul_triton", globals())

BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 16

# %% tags=["solution"]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program: a loop over K of tl.dot into a float32 accumulator."""
    ### BEGIN SOLUTION
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    ### END SOLUTION


def matmul(a, b, transpose_b):
    """C = a @ b, or a @ b.T when transpose_b, for float16 matrices, accumulated in float32: a float16 (M, N) array."""
    ### BEGIN SOLUTION
    a, b = to_device(a, "fp16"), to_device(b, "fp16")
    if transpose_b:
        b = b.T  # a view: its strides say where each element is, no copy
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return to_numpy(c)
    ### END SOLUTION


# %%
rng = np.random.default_rng(0)
a, b = (rng.standard_normal(shape).astype(np.float16) for shape in ((45, 70), (70, 33)))
exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
print("largest difference:", np.abs(matmul(a, b, False).astype(np.float64) - exact).max(),
      np.abs(matmul(a, np.ascontiguousarray(b.T), True).astype(np.float64) - exact).max())

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

# %% tags=["check"]
check("matmul_tiles")
### BEGIN HIDDEN TESTS
check("matmul_tiles", hidden=True)
### END HIDDEN TESTS
