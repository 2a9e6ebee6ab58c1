"""Numerically stable softmax over the rows of a matrix in Triton: fused (a row in a block) and online (in blocks).

softmax(x)_j = exp(x_j) / sum_k exp(x_k) overflows float32 once some x_j > 88
(float16: > 11), and gives inf / inf = NaN. Subtracting the row's maximum m
first changes nothing mathematically (exp(x_j - m) / sum_k exp(x_k - m)) and
keeps every exponent <= 0: the terms lie in [0, 1] and the largest is 1, so
the sum is >= 1 and the division is safe.

**Fused** (`softmax_rows`): one program per row loads the whole row as one
block of BLOCK = next_power_of_2(cols) lanes (padding lanes load -inf, so they
neither win the max nor add to the sum: exp(-inf - m) = 0), takes the max,
the exponentials and their sum in registers, and writes the row once: one
read and one write of memory, where torch's unfused form (max, subtract, exp,
sum, divide) would make several passes.

**Online** (`softmax_online`), for rows longer than a block: one pass over the
row in blocks keeps a running max m and a running sum d of exp(x - m); when a
block raises the max from m to m', the sum so far was taken against the old
max and is rescaled, d' = d * exp(m - m') + sum(exp(x_block - m')). A second
pass writes exp(x - m) / d. Two reads and one write, for any row length.

Entries of -inf give 0 (exp(-inf) = 0), as a causal mask needs. A row of only
-inf has no finite maximum: the result is NaN there, as torch.softmax gives.
The online pass must not compute exp(-inf - (-inf)) = NaN for a leading block
of -inf (the running max still -inf): it uses 0 in place of a max of -inf.

Kernels load float32, float16 or bfloat16, compute in float32, and store in
x's dtype.
"""

import torch
import triton
import triton.language as tl

from aisys._validate import positive_int

from ._tensors import float_tensor, interpreted

# Longest row the fused kernel takes on a GPU: 16384 float32 in registers are 32 per thread with 16 warps. Longer rows
# go online, in blocks of ONLINE_BLOCK.
MAX_FUSED_BLOCK = 16384
ONLINE_BLOCK_GPU = 4096
ONLINE_BLOCK_CPU = 1024
MAX_BLOCK = 2**17  # the fused kernel's largest block when asked for directly (Triton's limit is 2**20 lanes)


def num_warps_for(block: int) -> int:
    """Warps for a program of `block` lanes: about 8 to 32 elements per thread, at most 16 warps (512 threads)."""
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Row r of out = softmax of row r of x, the whole row in one block of BLOCK >= n_cols lanes."""
    row = tl.program_id(0).to(tl.int64)  # row * stride may pass 2**31 in a large matrix
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    # Padding loads -inf: it never wins the max, and exp(-inf - m) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)  # every exponent <= 0: no overflow
    d = tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, (e / d).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Row r of out = softmax of row r of x, for any row length: an online pass for max and sum, one to write."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    m = tl.full([], float("-inf"), tl.float32)  # running max
    d = tl.zeros([], tl.float32)  # running sum of exp(x - m)
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # While every entry so far is -inf, m_new is -inf and exp(-inf - (-inf)) would be NaN; any finite stand-in
        # gives exp(-inf - 0) = 0, the right share of those entries.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        d = d * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)  # rescale the old sum to the new max
        m = m_new
    for col in range(0, n_cols, BLOCK):
        offs = col + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + offs, (tl.exp(x - m) / d).to(out_ptr.dtype.element_ty), mask=mask)


def _empty_or_none(x: torch.Tensor) -> torch.Tensor | None:
    return torch.empty_like(x) if x.numel() == 0 else None


def softmax_rows(x: torch.Tensor, num_warps: int | None = None) -> torch.Tensor:
    """Softmax of each row of the 2-D tensor x (rows, cols), fused: one program per row, the row in one block.

    num_warps: warps per program (default: num_warps_for the block)."""
    x = float_tensor("x", x, 2)
    if (out := _empty_or_none(x)) is not None:
        return out
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    if block > MAX_BLOCK:
        raise ValueError(f"x has rows of {cols} elements; the fused kernel holds at most {MAX_BLOCK} in one block: "
                         f"use softmax_online")
    out = torch.empty_like(x)
    num_warps = num_warps_for(block) if num_warps is None else positive_int("num_warps", num_warps)
    softmax_row_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps)
    return out


def softmax_online(x: torch.Tensor, block: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """Softmax of each row of the 2-D tensor x, online: each row in blocks of `block` elements (a power of two).

    num_warps: warps per program (default: num_warps_for the block)."""
    x = float_tensor("x", x, 2)
    block = (ONLINE_BLOCK_CPU if interpreted() else ONLINE_BLOCK_GPU) if block is None else positive_int("block", block)
    if block & (block - 1) or block > MAX_BLOCK:
        raise ValueError(f"block must be a power of two <= {MAX_BLOCK}, got {block}")
    if (out := _empty_or_none(x)) is not None:
        return out
    rows, cols = x.shape
    out = torch.empty_like(x)
    num_warps = num_warps_for(block) if num_warps is None else positive_int("num_warps", num_warps)
    softmax_online_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps)
    return out


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of the 2-D tensor x: fused where a row fits a block, online for longer rows."""
    x = float_tensor("x", x, 2)
    if triton.next_power_of_2(max(x.shape[1], 1)) <= MAX_FUSED_BLOCK:
        return softmax_rows(x)
    return softmax_online(x)
