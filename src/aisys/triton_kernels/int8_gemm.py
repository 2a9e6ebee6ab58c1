"""INT8 GEMM in Triton: int8 x int8 on Tensor Cores, summed in int32, with the scaling fused into the store.

Each program computes one BLOCK_M x BLOCK_N tile of C = A @ B as chapter 3's GEMM does (aisys.triton_kernels.matmul:
grouped program order, masked loads, a loop over K), with two differences:

- the inputs are int8 and `tl.dot(a, b, acc)` adds into an int32 accumulator (out_dtype int32), which Hopper runs
  as `wgmma ... .s32.s8.s8` at twice the BF16 rate. Every partial sum is exact: int8 products are at most 2**14
  in size, so K < 2**17 of them fit int32 (aisys.quant.int8_gemm.MAX_K);
- the epilogue, run once per tile while the accumulator is still in registers, does one of
    OUTPUT = 0: store the int32 accumulator (what torch._int_mm returns);
    OUTPUT = 1: requantize to int8 exactly as aisys.quant.int8_gemm.requantize (float64, round half to even,
                zero point, clamp), with per-token a_scale and per-channel b_scale and an int32 bias;
    OUTPUT = 2: dequantize to float32 as aisys.quant.int8_gemm.dequantize_acc (float32(acc) * a_scale * b_scale
                + bias): a W8A8 linear layer's output.
  Fused, the int32 (M, N) matrix never goes to memory: 4 bytes per output element saved twice (a write and a read)
  over _int_mm followed by a scaling kernel.

On Hopper, 8-bit wgmma reads both operands K-major from shared memory: B should be a (K, N) view of an (N, K)
row-major weight (`w.t()`), the layout of a linear layer's weight and the one torch._int_mm and cuBLASLt want.
Any strides work; others are slower.
"""

import numpy as np
import torch
import triton
import triton.language as tl

from aisys.quant.int8_gemm import max_k
from aisys.triton_kernels._tensors import interpreted, tensor_on_triton_device
from aisys.triton_kernels.matmul import gemm_config, grouped_tile

OUTPUTS = {"int32": 0, "int8": 1, "float32": 2}


# Shared memory per program is num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K bytes (int8): 192 KiB for 128 x 256 x 128
# in 4 stages, within the H100's 227 KiB per block. The int32 accumulator takes BLOCK_M * BLOCK_N / (32 * warps)
# registers per thread: 128 for 128 x 256 on 8 warps.
GPU_CONFIGS = [
    gemm_config(128, 256, 128, 3, 8),
    gemm_config(128, 256, 128, 4, 8),
    gemm_config(256, 128, 128, 3, 8),
    gemm_config(256, 128, 128, 4, 8),
    gemm_config(128, 256, 64, 4, 8),
    gemm_config(128, 256, 64, 5, 8),
    gemm_config(128, 128, 128, 4, 8),
    gemm_config(128, 128, 128, 4, 4),
    gemm_config(128, 128, 64, 5, 4),
    gemm_config(64, 128, 128, 4, 4),
]
INTERPRETER_CONFIGS = [gemm_config(32, 32, 64, 1, 4)]  # the interpreter runs a program in ~1 ms whatever its tile


@triton.jit
def _round_half_even(x):
    """x (float64) rounded to the nearest integer, ties to the even one, as np.round (exact: x - floor(x) is)."""
    below = tl.floor(x)
    fraction = x - below
    odd = (below - 2.0 * tl.floor(below * 0.5)) == 1.0
    return below + ((fraction > 0.5) | ((fraction == 0.5) & odd)).to(tl.float64)


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS, key=["M", "N", "K", "OUTPUT"])
@triton.jit
def int8_gemm_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale, out_zero_point,
                     M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program in grouped order, int32 sums, OUTPUT's epilogue."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # int8 x int8 -> int32 on the Tensor Cores
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    in_m, in_n = offs_m < M, offs_n < N
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if OUTPUT == 0:
        tl.store(c_ptrs, acc, mask=in_m[:, None] & in_n[None, :])
    else:
        a_scale = tl.load(a_scale_ptr + offs_m, mask=in_m, other=1.0)  # one per token: a row of C
        b_scale = tl.load(b_scale_ptr + offs_n, mask=in_n, other=1.0)  # one per output channel: a column
        if OUTPUT == 1:
            total = acc.to(tl.float64)
            if HAS_BIAS:
                total += tl.load(bias_ptr + offs_n, mask=in_n, other=0).to(tl.float64)[None, :]
            scale = a_scale.to(tl.float64)[:, None] * b_scale.to(tl.float64)[None, :]  # exact: 48 bits
            codes = _round_half_even(total * scale / out_scale) + out_zero_point  # float64: out_scale is a float32
            codes = tl.minimum(tl.maximum(codes, -128.0), 127.0)
            tl.store(c_ptrs, codes.to(tl.int8), mask=in_m[:, None] & in_n[None, :])
        else:
            out = acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]
            if HAS_BIAS:
                out += tl.load(bias_ptr + offs_n, mask=in_n, other=0.0)[None, :]
            tl.store(c_ptrs, out, mask=in_m[:, None] & in_n[None, :])


def _vector(name: str, x, length: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A scale or bias as a contiguous vector of `length` on `device`: a scalar is repeated."""
    t = torch.as_tensor(x, device=device)
    if t.dtype != dtype or t.numel() not in (1, length):
        raise ValueError(f"{name} must be {dtype} holding 1 or {length} values, got {t.dtype} of shape "
                         f"{tuple(t.shape)}")
    return t.reshape(-1).expand(length).contiguous()


def int8_gemm(a: torch.Tensor, b: torch.Tensor, *, output: str = "int32", a_scale=None, b_scale=None,
              out_scale: float | None = None, out_zero_point: int = 0, bias=None) -> torch.Tensor:
    """C = a @ b for int8 a (M, K) and b (K, N), summed in int32, returned as `output`:

    "int32": the accumulator; "int8": requantized (a_scale float32 per token (M,) / (M, 1) or one value, b_scale
    per channel (N,) / (1, N) or one value, out_scale a float32 value, out_zero_point, bias int32 (N,));
    "float32": dequantized, float32(acc) * a_scale * b_scale + bias (float32 (N,))."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(map(repr, OUTPUTS))}; got {output!r}")
    for name, x in (("a", a), ("b", b)):
        tensor_on_triton_device(name, x)
        if x.ndim != 2 or x.dtype != torch.int8 or x.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 2-D int8 tensor, got {x.dtype} of shape {tuple(x.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} (K = {a.shape[1]}) "
                         f"and b is {tuple(b.shape)} (K = {b.shape[0]})")
    M, K = a.shape
    N = b.shape[1]
    if K > max_k():
        raise ValueError(f"K = {K} is too long for an int32 accumulator (at most {max_k()})")
    dtype = {"int32": torch.int32, "int8": torch.int8, "float32": torch.float32}[output]
    c = torch.empty((M, N), dtype=dtype, device=a.device)
    a_vec = b_vec = bias_vec = c  # unused pointers when OUTPUT is 0
    if output != "int32":
        if a_scale is None or b_scale is None:
            raise ValueError(f"output {output!r} needs a_scale and b_scale")
        a_vec = _vector("a_scale", a_scale, M, torch.float32, a.device)
        b_vec = _vector("b_scale", b_scale, N, torch.float32, a.device)
        if bias is not None:
            bias_vec = _vector("bias", bias, N, torch.int32 if output == "int8" else torch.float32, a.device)
    if output == "int8":
        if out_scale is None or not float(out_scale) > 0:
            raise ValueError(f"output 'int8' needs out_scale > 0, got {out_scale!r}")
        if not -128 <= int(out_zero_point) <= 127:
            raise ValueError(f"out_zero_point must be in [-128, 127], got {out_zero_point!r}")

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    # A float argument reaches the kernel as float32, out_scale's type: passed by value, not in a tensor whose copy
    # to the GPU would make the host wait for the GPU on every call (it halved the speed measured at 4096^3).
    out_scale = float(np.float32(1.0 if out_scale is None else out_scale))
    int8_gemm_kernel[grid](a, b, c, a_vec, b_vec, bias_vec, out_scale, int(out_zero_point),
                           M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                           OUTPUT=OUTPUTS[output], HAS_BIAS=bias is not None)
    return c
