"""Matrix multiplication in Triton: C = A @ B on Tensor Cores, FP16/BF16 inputs accumulated in FP32.

Each program computes one BLOCK_M x BLOCK_N tile of C. It walks K in steps of
BLOCK_K, loading a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of
B and adding their product to a float32 accumulator with `tl.dot`, which the
compiler lowers to the Tensor Core instructions of the GPU (`wgmma` on Hopper,
`mma.sync` on Ampere) and pipelines over `num_stages` tiles in shared memory.
The accumulator is rounded to the inputs' dtype once, when the tile is stored.

Masks make ragged shapes work: loads past the edge of A or B read 0, which
adds nothing to the dot product, and stores past the edge of C are dropped.

Programs are numbered in groups of GROUP_M rows of tiles ("grouped" or
"swizzled" order, as in Triton's matmul tutorial): programs that run at the
same time then share rows of A and columns of B in the L2 cache, where
row-major order would stream all of B once per row of tiles.

On a GPU the tile sizes are autotuned per (M, N, K) among configurations that
suit Hopper and Ampere; Triton's interpreter (a CPU) runs one small tile.
"""

import torch
import triton
import triton.language as tl

from aisys.triton_kernels._tensors import interpreted, tensor_on_triton_device

DTYPES = (torch.float16, torch.bfloat16)


def gemm_config(m, n, k, stages, warps):
    """One tile configuration of a grouped-order GEMM kernel (GROUP_M 8)."""
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=stages, num_warps=warps)


# Shared memory per program is num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes: 192 KiB for the
# largest here, within the H100's 227 KiB per block.
GPU_CONFIGS = [
    gemm_config(128, 256, 64, 3, 8),
    gemm_config(256, 128, 64, 3, 8),
    gemm_config(128, 256, 64, 4, 8),
    gemm_config(128, 128, 64, 4, 8),
    gemm_config(128, 128, 64, 4, 4),
    gemm_config(64, 256, 64, 4, 4),
    gemm_config(128, 64, 64, 4, 4),
    gemm_config(64, 128, 64, 4, 4),
    gemm_config(64, 64, 64, 4, 4),
    # Skinny products (N of 1 to 16, as in decoding) are memory-bound: a narrow tile reads A once, and more
    # programs along M keep every SM streaming.
    gemm_config(64, 16, 128, 4, 4),
    gemm_config(32, 16, 256, 3, 4),
]
INTERPRETER_CONFIGS = [gemm_config(32, 32, 32, 1, 4)]  # the interpreter runs a program in ~1 ms whatever its tile


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of the tile program `pid` computes, in grouped order: GROUP_M rows of tiles are swept column
    by column, so programs running together share rows of A and columns of B in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_rows, (pid % per_group) // group_rows


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  UPCAST: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program, in grouped order."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        if UPCAST:  # Triton's interpreter multiplies bfloat16 wrongly: give it float32 (exact for bf16 values)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = a @ b for 2-D float16 or bfloat16 tensors of one dtype, accumulated in float32, returned in that dtype."""
    for name, x in (("a", a), ("b", b)):
        tensor_on_triton_device(name, x)
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(x.shape)}")
        if x.dtype not in DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16 (Tensor Core inputs), got {x.dtype}")
        if x.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} (K = {a.shape[1]}) "
                         f"and b is {tuple(b.shape)} (K = {b.shape[0]})")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), UPCAST=interpreted() and a.dtype == torch.bfloat16)
    return c
