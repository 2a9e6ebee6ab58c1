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

`int8_gemm_kernel` is the readable kernel (the exercise's, and the one Triton's interpreter runs on a CPU). On a
Hopper GPU, with that layout and 16-byte aligned rows, `int8_gemm` runs `int8_gemm_tma_kernel` instead: the same
tiles and epilogue, its loads and stores done by the Tensor Memory Accelerator from descriptors. At 4096^3 on an
H200 the pointer kernel reached 0.6x torch._int_mm's speed and the TMA one 1.1x (benchmarks/quant_int8.py).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from aisys.quant.int8_gemm import max_k
from aisys.triton_kernels._tensors import interpreted, tensor_on_triton_device

OUTPUTS = {"int32": 0, "int8": 1, "float32": 2}


def _config(m, n, k, stages, warps):
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=stages, num_warps=warps)


# Shared memory per program is num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K bytes (int8): 192 KiB for 128 x 256 x 128
# in 4 stages, within the H100's 227 KiB per block. The int32 accumulator takes BLOCK_M * BLOCK_N / (32 * warps)
# registers per thread: 128 for 128 x 256 on 8 warps.
GPU_CONFIGS = [
    _config(128, 256, 128, 3, 8),
    _config(128, 256, 128, 4, 8),
    _config(256, 128, 128, 3, 8),
    _config(256, 128, 128, 4, 8),
    _config(128, 256, 64, 4, 8),
    _config(128, 256, 64, 5, 8),
    _config(128, 128, 128, 4, 8),
    _config(128, 128, 128, 4, 4),
    _config(128, 128, 64, 5, 4),
    _config(64, 128, 128, 4, 4),
]
INTERPRETER_CONFIGS = [_config(32, 32, 64, 1, 4)]  # the interpreter runs a program in ~1 ms whatever its tile


@triton.jit
def _round_half_even(x):
    """x (float64) rounded to the nearest integer, ties to the even one, as np.round (exact: x - floor(x) is)."""
    below = tl.floor(x)
    fraction = x - below
    odd = (below - 2.0 * tl.floor(below * 0.5)) == 1.0
    return below + ((fraction > 0.5) | ((fraction == 0.5) & odd)).to(tl.float64)


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS, key=["M", "N", "K", "OUTPUT"])
@triton.jit
def int8_gemm_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr, out_zero_point,
                     M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program in grouped order, int32 sums, OUTPUT's epilogue."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

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

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    out = _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr, out_zero_point,
                    OUTPUT, HAS_BIAS)
    tl.store(c_ptrs, out, mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr, out_zero_point,
              OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The tile C[offs_m, offs_n] as OUTPUT's type, from its int32 sums still in registers."""
    if OUTPUT == 0:
        return acc
    in_m, in_n = offs_m < M, offs_n < N
    a_scale = tl.load(a_scale_ptr + offs_m, mask=in_m, other=1.0)  # one per token: a row of C
    b_scale = tl.load(b_scale_ptr + offs_n, mask=in_n, other=1.0)  # one per output channel: a column
    if OUTPUT == 1:
        total = acc.to(tl.float64)
        if HAS_BIAS:
            total += tl.load(bias_ptr + offs_n, mask=in_n, other=0).to(tl.float64)[None, :]
        scale = a_scale.to(tl.float64)[:, None] * b_scale.to(tl.float64)[None, :]  # exact: 48 bits
        codes = _round_half_even(total * scale / tl.load(out_scale_ptr).to(tl.float64)) + out_zero_point
        return tl.minimum(tl.maximum(codes, -128.0), 127.0).to(tl.int8)
    out = acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]
    if HAS_BIAS:
        out += tl.load(bias_ptr + offs_n, mask=in_n, other=0.0)[None, :]
    return out


def _set_block_shapes(nargs):
    """Autotuning's pre-hook: the descriptors move tiles of the configuration's shape."""
    nargs["a_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_K"]]
    nargs["b_desc"].block_shape = [nargs["BLOCK_N"], nargs["BLOCK_K"]]
    nargs["c_desc"].block_shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]


# Measured on an H200 at 4096^3 (int32 output): 128 x 128 x 128 in 5 stages on 4 warps beat torch._int_mm; the
# int32 output tile is staged in shared memory too (64 KiB), which rules out 128 x 256 x 128.
TMA_CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=stages,
                             num_warps=warps, pre_hook=_set_block_shapes)
               for m, n, k, stages, warps in ((128, 128, 128, 5, 4), (128, 128, 128, 4, 8), (128, 256, 64, 4, 8),
                                              (128, 128, 64, 5, 4))]


@triton.autotune(configs=TMA_CONFIGS, key=["M", "N", "K", "OUTPUT"])
@triton.jit
def int8_gemm_tma_kernel(a_desc, b_desc, c_desc, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr, out_zero_point,
                         M, N, K, OUTPUT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The same tile on Hopper, its operands moved by the TMA unit: one descriptor load per operand and step
    instead of BLOCK x BLOCK_K addresses computed by the threads, edges zero-filled (no masks), B read as the
    (N, K) weight it is, and the output tile stored by the TMA as well."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N],
                 _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, out_scale_ptr,
                           out_zero_point, OUTPUT, HAS_BIAS))


def _tma_fits(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Whether the TMA kernel can run: a Hopper or later GPU, row-major a and c, b the transpose of a row-major
    (N, K) weight, and every row 16-byte aligned (the TMA unit's rule)."""
    if interpreted() or a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] < 9:
        return False
    weight = b.t()
    return (a.is_contiguous() and weight.is_contiguous() and c.is_contiguous()
            and all(t.stride(0) * t.element_size() % 16 == 0 and t.data_ptr() % 16 == 0 for t in (a, weight, c)))


def _vector(name: str, x, length: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A scale or bias as a contiguous vector of `length` on `device`: a scalar is repeated."""
    t = torch.as_tensor(x, device=device)
    if t.dtype != dtype or t.numel() not in (1, length):
        raise ValueError(f"{name} must be {dtype} holding 1 or {length} values, got {t.dtype} of shape "
                         f"{tuple(t.shape)}")
    return t.reshape(-1).expand(length).contiguous()


def int8_gemm(a: torch.Tensor, b: torch.Tensor, *, output: str = "int32", a_scale=None, b_scale=None,
              out_scale: float | None = None, out_zero_point: int = 0, bias=None, tma: bool = True) -> torch.Tensor:
    """C = a @ b for int8 a (M, K) and b (K, N), summed in int32, returned as `output`:

    "int32": the accumulator; "int8": requantized (a_scale float32 per token (M,) / (M, 1) or one value, b_scale
    per channel (N,) / (1, N) or one value, out_scale a float32 value, out_zero_point, bias int32 (N,));
    "float32": dequantized, float32(acc) * a_scale * b_scale + bias (float32 (N,)).

    tma=False runs the readable pointer kernel even where the TMA kernel could run (to compare the two)."""
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

    out_scale_vec = torch.tensor([1.0 if out_scale is None else float(out_scale)], dtype=torch.float32,
                                 device=a.device)  # float32, loaded by the kernel (a float argument is float32 too)
    scaling = (a_vec, b_vec, bias_vec, out_scale_vec, int(out_zero_point))
    flags = {"OUTPUT": OUTPUTS[output], "HAS_BIAS": bias is not None}
    if tma and _tma_fits(a, b, c):
        descriptors = [TensorDescriptor.from_tensor(t, [1, 1]) for t in (a, b.t(), c)]  # tiles set per config
        int8_gemm_tma_kernel[grid](*descriptors, *scaling, M, N, K, **flags)
    else:
        int8_gemm_kernel[grid](a, b, c, *scaling, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               c.stride(0), c.stride(1), **flags)
    return c
