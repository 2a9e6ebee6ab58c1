"""Moves B's pointers by BLOCK_K * stride_ak, A's stride along K (1): B slides BLOCK_K columns right instead of
BLOCK_K rows down."""

FAILS = ["matmul", "matmul_fp32_accumulator", "matmul_every_config"]


@triton.jit  # noqa: F821
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # noqa: F821
                  GROUP_M: tl.constexpr, UPCAST: tl.constexpr):  # noqa: F821
    pid_m, pid_n = tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)  # noqa: F821
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # noqa: F821
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # noqa: F821
    offs_k = tl.arange(0, BLOCK_K)  # noqa: F821
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # noqa: F821
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)  # noqa: F821
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)  # noqa: F821
        if UPCAST:
            a = a.to(tl.float32)  # noqa: F821
            b = b.to(tl.float32)  # noqa: F821
        acc = tl.dot(a, b, acc)  # noqa: F821
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_ak
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
