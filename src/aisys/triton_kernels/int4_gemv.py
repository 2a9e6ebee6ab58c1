"""W4A16 in Triton: y = x @ W.T with W stored as 4-bit codes packed 8 per int32 word, dequantized in registers.

The layout is aisys.quant.int4's: packed (N, K // 8) int32 words along K (sequential or AWQ nibble order), scales
(N, K // G) float16 and zero points (N, K // G) uint8 in [0, 15], one per group of G inputs; x (M, K) with M from
1 (a decode step) to 16 (a small batch), float16, bfloat16 or float32; y (M, N) in x's dtype.

At M = 1 the product is all memory traffic: 2 FLOPs per weight against half a byte of it, far left of any GPU's
ridge point, so `w4a16_gemv_kernel` is built to stream the packed words. That takes more than wide loads: an H200
reads about 8e12 packed weights a second, and its SMs issue about 3.3e13 instructions a second (132 SMs x 4
schedulers x 32 lanes x 1.98 GHz), so unpacking may cost only a few instructions a weight, and every one of them
delays the next loads of its warp. Each program owns BLOCK_N output rows and walks K, GROUPS groups of G inputs
(a tile of BLOCK_N x GROUPS G / 8 words) at a time:

- the words of a tile are contiguous along K in each row, loaded 16 bytes (4 words) per thread and
  software-pipelined `STAGES` tiles ahead (asynchronous copies through shared memory, `tl.range`'s num_stages);
- the zero point leaves the inner loop: sum_k s (q_k - z) x_k = s (sum_k q_k x_k - z sum_k x_k), with the groups'
  sums of x computed once per tile for all its rows, so the per-weight work is q x alone;
- a code becomes a number without an int-to-float conversion (the CUDA C++ Programming Guide's throughput table
  lists 16 conversions per clock per SM on compute capability 9.0 against 128 FP32 operations; not checked here):
  OR'ed with the exponent bits of a power of two, the nibble left in place is the mantissa of 2^e + q, exactly
  (FasterTransformer's trick), and subtracting 2^e leaves q;
- x float16 on a GPU (PAIRS, the path of a decode step): two weights per instruction, in half2 (QX_ASM, inline
  PTX). The nibbles j and j + 4 of a word lie in its two 16-bit halves, so one LOP3 makes the fp16 pair
  (1024 + q_j, 1024 + q_j+4) (or 1024 + 16 q for the odd nibbles), one half2 add (or multiply-add by 1/16) leaves
  (q_j, q_j+4), and a half2 multiply-add by x's pair sums 2 products: per word of 8 weights, 1 shift, 4 LOP3,
  4 half2 dequantizations, 4 half2 multiply-adds, 2 conversions and 2 adds into float32. The 4 products of each
  fp16 lane stay below 4 x 15 |x|: no overflow for |x| < 1000 (activations beyond that need the float32 path).
  x's fp16 pairs are regrouped once per word of x a thread holds, shared by its rows (X_PAIRS_ASM: 4 PRMT; AWQ's
  interleaved order needs none: its nibbles j, j + 4 are the inputs 2 j, 2 j + 1);
- other x dtypes and Triton's interpreter (a CPU, which runs no PTX) take the float32 path: 2^(23 - 4 s) + q per
  nibble at bits 4 s of each 16-bit half, then an FFMA with x per weight;
- the grid is cdiv(N, BLOCK_N) programs; small BLOCK_N (8 to 32) gives N = 4096 its 256 to 512 programs,
  instead of splitting K (a zeroed buffer and atomics or a second pass: more launches, microseconds each).

What was slow, and what changed (an H200, Triton 3.6, measured with aisys.bench as benchmarks/quant_w4a16.py does:
L2 flushed, CUDA events; book/08-quantization/w4a16_gemv_h200.json): the float32 design, the only path before,
took 0.0194, 0.0224 and 0.0251 ms at 11008 x 4096, 4096 x 11008 and 8192 x 8192 (0.29, 0.25 and 0.33 of the copy
bandwidth; 1.50, 1.34 and 1.64 times F.linear's speed). Its hot loop took 4.3 to 5.7 SASS instructions per
weight: 6 to 8 microseconds of issue at 11008 x 4096 if every scheduler issued every clock, which they do not
while the same warps wait on their loads. The fp16 path above takes 3.0 to 3.9 (tests/test_quant_int4.py keeps it
under 3.5 at one config and checks the half2 math, the 16-byte copies and x's regrouping once per word of x), and
took the same shapes to 0.0140, 0.0167 and 0.0168 ms (0.40, 0.33 and 0.49 of the copy bandwidth; 1.95, 1.77 and
2.38 times F.linear). Two floors, measured the same way: an empty kernel takes 0.0032 to 0.0035 ms, and a plain
Triton read of the packed words (an XOR reduction over 1056 programs, no arithmetic) 0.010 to 0.013 ms, 0.48 to
0.61 of the copy bandwidth. The goals, 0.7 of the copy bandwidth and 2.5 times F.linear, are not met: 0.7 at
11008 x 4096 (23.6 MB) is 0.0079 ms, less than the empty launch plus the bytes at the HBM's peak, so out of reach
of one kernel at these sizes as measured; at 8192 x 8192 it would take 0.97 of the copy bandwidth after the
launch. What is left is keeping more bytes in flight per SM from the start, not the arithmetic. Tried and not
kept: the products on the tensor cores (mma.sync m16n8k16 from inline PTX, x in one column, 1.9 instructions per
weight) took 0.020 to 0.025 ms: fewer instructions alone did not make it faster.

`w4a16_skinny_kernel` is the general kernel for M from 2 to 16 and for group sizes that are not powers of two: it
broadcasts each word to its 8 codes, shifts and masks, dequantizes (q - z) s in float32 and sums x w along K.
Block sizes, warps and pipeline depth are autotuned per shape on a GPU; Triton's interpreter (a CPU) runs one small
tile, for correctness checks.
"""

import torch
import triton
import triton.language as tl

from aisys.triton_kernels._tensors import FLOAT_DTYPES, interpreted, tensor_on_triton_device

PACK = 8  # codes per int32 word
MAX_M = 16  # a skinny product: beyond a few rows of x a Tensor Core GEMM (dequantize, then tl.dot) wins
ORDERS = ("sequential", "awq")
MAGIC = 0x4B000000  # the bits of the float 2^23: OR'ed with an integer below 2^23, the float 2^23 + that integer
SMEM_BYTES = 160 * 1024  # pipeline buffers of one program, at most: H100's 227 KiB per block, with room


def _gemv_config(n, groups, warps, stages):
    return triton.Config({"BLOCK_N": n, "GROUPS": groups, "STAGES": stages}, num_warps=warps)


GEMV_CONFIGS = [  # (BLOCK_N, GROUPS, warps, stages): the 8 fastest of 20 on an H200 (see the module's docstring)
    _gemv_config(16, 8, 4, 3), _gemv_config(32, 8, 8, 3), _gemv_config(16, 16, 8, 2), _gemv_config(16, 8, 8, 4),
    _gemv_config(8, 8, 4, 4), _gemv_config(16, 4, 4, 1), _gemv_config(16, 8, 4, 2), _gemv_config(16, 8, 8, 1),
]
GEMV_INTERPRETER_CONFIGS = [_gemv_config(16, 2, 4, 1)]

# q x for the 8 codes of one word, in fp16 pairs (half2): 16 instructions for 8 weights. The word's nibbles j and
# j + 4 sit at bits 4 j and 4 j + 16, the two halves of a 32-bit register: masked and OR'ed with 0x6400 (the fp16
# 1024) in one LOP3, each half is the fp16 1024 + q (nibbles 0, 4 and, after a shift by 8, 2, 6) or 1024 + 16 q
# (nibbles 1, 5 and 3, 7). A half2 subtract of 1024 (or a multiply by 1/16 and add of -64) leaves q, exactly; four
# half2 multiply-adds with x's pairs sum the 8 products into two fp16 lanes (4 products each: at most 60 |x|, so no
# overflow below |x| = 1000), converted to float32 and added. $1: the word; $2..$5: x's fp16 pairs for the nibbles
# (0, 4), (1, 5), (2, 6), (3, 7).
QX_ASM = tl.constexpr("""{
.reg .b32 hi, t0, t1, t2, t3, a, sixteenth, m1024, m64;
.reg .f16 lo16, hi16;
.reg .f32 flo, fhi;
mov.b32 sixteenth, 0x2C002C00;
mov.b32 m1024, 0xE400E400;
mov.b32 m64, 0xD400D400;
shr.u32 hi, $1, 8;
lop3.b32 t0, $1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 t1, $1, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 t2, hi, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 t3, hi, 0x00F000F0, 0x64006400, 0xEA;
add.rn.f16x2 t0, t0, m1024;
fma.rn.f16x2 t1, t1, sixteenth, m64;
add.rn.f16x2 t2, t2, m1024;
fma.rn.f16x2 t3, t3, sixteenth, m64;
mul.rn.f16x2 a, t0, $2;
fma.rn.f16x2 a, t1, $3, a;
fma.rn.f16x2 a, t2, $4, a;
fma.rn.f16x2 a, t3, $5, a;
mov.b32 {lo16, hi16}, a;
cvt.f32.f16 flo, lo16;
cvt.f32.f16 fhi, hi16;
add.f32 $0, flo, fhi;
}""")
# x's 8 fp16 inputs of one word ($5..$8: the pairs (0, 1), (2, 3), (4, 5), (6, 7)) regrouped as the pairs of
# nibbles (j, j + 4) of a sequential word, $0..$3 (one PRMT each), and their sum in float32, $4
X_PAIRS_ASM = tl.constexpr("""{
.reg .b32 a;
.reg .f16 lo16, hi16;
.reg .f32 flo, fhi;
prmt.b32 $0, $5, $7, 0x5410;
prmt.b32 $1, $5, $7, 0x7632;
prmt.b32 $2, $6, $8, 0x5410;
prmt.b32 $3, $6, $8, 0x7632;
add.rn.f16x2 a, $5, $6;
add.rn.f16x2 a, a, $7;
add.rn.f16x2 a, a, $8;
mov.b32 {lo16, hi16}, a;
cvt.f32.f16 flo, lo16;
cvt.f32.f16 fhi, hi16;
add.f32 $4, flo, fhi;
}""")


@triton.jit
def _x_pairs(x01, x23, x45, x67):
    """X_PAIRS_ASM: x's pairs of nibbles (j, j + 4) of a sequential word, and the word's sum of x (float32)."""
    return tl.inline_asm_elementwise(X_PAIRS_ASM, "=r,=r,=r,=r,=r,r,r,r,r", [x01, x23, x45, x67],
                                     dtype=(tl.int32, tl.int32, tl.int32, tl.int32, tl.float32), is_pure=True,
                                     pack=1)


@triton.jit
def _qx(words, p0, p1, p2, p3):
    """QX_ASM: sum of q x over each word's 8 codes (float32), from x's pairs p0..p3 for the nibbles (j, j + 4)."""
    return tl.inline_asm_elementwise(QX_ASM, "=r,r,r,r,r,r", [words, p0, p1, p2, p3], dtype=tl.float32,
                                     is_pure=True, pack=1)


def _prune_gemv(configs, named_args, **kwargs):
    """Configs whose GROUPS fit K's groups and whose pipeline fits the shared memory."""
    groups = named_args["K"] // kwargs["GROUP_SIZE"]
    fitting = [c for c in configs if c.kwargs["GROUPS"] <= groups
               and c.kwargs["STAGES"] * c.kwargs["BLOCK_N"] * c.kwargs["GROUPS"] * kwargs["GROUP_SIZE"] // 2
               <= SMEM_BYTES]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_N"] * c.kwargs["GROUPS"])]


@triton.autotune(configs=GEMV_INTERPRETER_CONFIGS if interpreted() else GEMV_CONFIGS,
                 key=["N", "K", "GROUP_SIZE", "AWQ", "PAIRS"], prune_configs_by={"early_config_prune": _prune_gemv})
@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,
                    "EVEN_GROUPS": lambda args: (args["K"] // args["GROUP_SIZE"]) % args["GROUPS"] == 0})
@triton.jit
def w4a16_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, N, K, stride_wn, stride_sn, magic,
                      GROUP_SIZE: tl.constexpr, AWQ: tl.constexpr, PAIRS: tl.constexpr, BLOCK_N: tl.constexpr,
                      GROUPS: tl.constexpr, STAGES: tl.constexpr, EVEN_N: tl.constexpr, EVEN_GROUPS: tl.constexpr):
    """y[0, n] for rows n in [pid * BLOCK_N, + BLOCK_N), x of one row; G a power of two >= 8 (see the module).
    PAIRS: x is float16 and the kernel compiled for a GPU: the codes are multiplied in fp16 pairs (QX_ASM)."""
    WORDS: tl.constexpr = GROUP_SIZE // 8
    BLOCK_W: tl.constexpr = GROUPS * WORDS  # words of a row in one tile
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, BLOCK_W)
    offs_g = tl.arange(0, GROUPS)
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn + offs_w[None, :]  # (BLOCK_N, BLOCK_W)
    s_ptrs = s_ptr + offs_n[:, None] * stride_sn + offs_g[None, :]  # (BLOCK_N, GROUPS)
    z_ptrs = z_ptr + offs_n[:, None] * stride_sn + offs_g[None, :]
    if PAIRS:  # x's 8 fp16 inputs of each word as 4 int32 words (fp16 pairs): (BLOCK_W, 4)
        x_ptrs = x_ptr.to(tl.pointer_type(tl.int32)) + offs_w[:, None] * 4 + tl.arange(0, 4)[None, :]
    else:  # x's 8 inputs of each word: (BLOCK_W, 8)
        x_ptrs = x_ptr + offs_w[:, None] * 8 + tl.arange(0, 8)[None, :]
    total_groups = K // GROUP_SIZE
    acc = tl.zeros((BLOCK_N, GROUPS), tl.float32)
    for g0 in tl.range(0, total_groups, GROUPS, num_stages=STAGES):
        if EVEN_N and EVEN_GROUPS:
            words = tl.load(w_ptrs + g0 * WORDS)
            s = tl.load(s_ptrs + g0).to(tl.float32)
            z = tl.load(z_ptrs + g0).to(tl.float32)
            x_in = offs_w[:, None] >= 0
        else:
            w_in = (offs_n[:, None] < N) & (g0 * WORDS + offs_w[None, :] < total_groups * WORDS)
            g_in = (offs_n[:, None] < N) & (g0 + offs_g[None, :] < total_groups)
            words = tl.load(w_ptrs + g0 * WORDS, mask=w_in, other=0)
            s = tl.load(s_ptrs + g0, mask=g_in, other=0.0).to(tl.float32)
            z = tl.load(z_ptrs + g0, mask=g_in, other=0).to(tl.float32)
            x_in = (g0 * WORDS + offs_w < total_groups * WORDS)[:, None]
        if PAIRS:
            x = tl.load(x_ptrs + g0 * (GROUP_SIZE // 2), mask=x_in, other=0)
            x01_45, x23_67 = tl.split(tl.reshape(x, (BLOCK_W, 2, 2)))  # int32 i = 2 a + b: split takes b
            x01, x45 = tl.split(x01_45)  # fp16 inputs (0, 1) and (4, 5): i = 0 and 2
            x23, x67 = tl.split(x23_67)
            p0, p1, p2, p3, sx = _x_pairs(x01, x23, x45, x67)  # once per word of x, for all the tile's rows
            if AWQ:  # nibbles (0, 4), (1, 5), (2, 6), (3, 7) hold the inputs (0, 1), (2, 3), (4, 5), (6, 7)
                p0, p1, p2, p3 = x01, x23, x45, x67
            shape: tl.constexpr = (BLOCK_N, BLOCK_W)
            t = _qx(words, tl.broadcast_to(p0[None, :], shape), tl.broadcast_to(p1[None, :], shape),
                    tl.broadcast_to(p2[None, :], shape), tl.broadcast_to(p3[None, :], shape))
        else:
            high = words >> 16  # nibbles 4..7 at bits 0..15 (bits above are the sign's: every mask below clears them)
            # x in float32, split in registers into its 8 elements of every word: j = 4a + 2b + c
            x = tl.load(x_ptrs + g0 * GROUP_SIZE, mask=x_in, other=0.0).to(tl.float32)
            even, odd = tl.split(tl.reshape(x, (BLOCK_W, 2, 2, 2)))  # c
            x04, x26 = tl.split(even)  # b
            x15, x37 = tl.split(odd)
            x0, x4 = tl.split(x04)  # a
            x2, x6 = tl.split(x26)
            x1, x5 = tl.split(x15)
            x3, x7 = tl.split(x37)
            xs = (x0, x1, x2, x3, x4, x5, x6, x7)
            sx = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
            t = tl.zeros((BLOCK_N, BLOCK_W), tl.float32)
            for j in tl.static_range(8):  # element j of every word
                if AWQ:
                    position = j // 2 + (j % 2) * 4
                else:
                    position = j
                slot = position % 4  # the nibble's place in its 16-bit half
                half = high if position >= 4 else words
                # exponent of 2^(23 - 4 slot): the nibble's lowest bit weighs 1, the float is 2^(23 - 4 slot) + q
                f = ((half & (0xF << (4 * slot))) | (magic - slot * 0x2000000)).to(tl.float32, bitcast=True)
                t += (f - (1 << (23 - 4 * slot))) * xs[j][None, :]  # q x, exactly up to the product
        # per row and group: s (sum q x - z sum x) = sum s (q - z) x
        qx = tl.sum(tl.reshape(t, (BLOCK_N, GROUPS, WORDS)), axis=2)
        xg = tl.sum(tl.reshape(sx, (GROUPS, WORDS)), axis=1)
        acc += (qx - z * xg[None, :]) * s
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=offs_n < N)


def _skinny_config(n, k, warps, stages):
    return triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=warps, num_stages=stages)


SKINNY_CONFIGS = [_skinny_config(8, 128, 4, 3), _skinny_config(16, 128, 4, 3), _skinny_config(16, 256, 4, 3),
                  _skinny_config(32, 128, 4, 3), _skinny_config(32, 256, 8, 3), _skinny_config(64, 128, 8, 3)]
SKINNY_INTERPRETER_CONFIGS = [_skinny_config(16, 64, 4, 1)]
MOST_PRODUCTS = 16384  # BLOCK_M x BLOCK_N x BLOCK_K float32 products per program: 128 registers a thread at 4 warps


def _prune_skinny(configs, named_args, **kwargs):
    """The configs whose x-by-w products fit the registers at this M (BLOCK_M = the next power of 2 of M)."""
    block_m = triton.next_power_of_2(named_args["M"])
    fitting = [c for c in configs if block_m * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"] <= MOST_PRODUCTS]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"])]


@triton.autotune(configs=SKINNY_INTERPRETER_CONFIGS if interpreted() else SKINNY_CONFIGS,
                 key=["M", "N", "K", "GROUP_SIZE"], prune_configs_by={"early_config_prune": _prune_skinny})
@triton.jit
def w4a16_skinny_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                        GROUP_SIZE: tl.constexpr, AWQ: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """Rows [pid * BLOCK_N, + BLOCK_N) of y (M, N) = x (M, K) @ W.T, W from packed (N, K // 8) int32 words."""
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_w = tl.arange(0, BLOCK_K // 8)
    rows_in = offs_n < N
    j = offs_k % 8
    if AWQ:
        shifts = (j // 2 + (j % 2) * 4) * 4  # element j sits at nibble j // 2 + 4 (j % 2)
    else:
        shifts = j * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_in = k < K
        word = k0 // 8 + offs_w
        words = tl.load(w_ptr + offs_n.to(tl.int64)[:, None] * (K // 8) + word[None, :],
                        mask=rows_in[:, None] & (word < K // 8)[None, :], other=0)
        words = tl.reshape(tl.broadcast_to(words[:, :, None], (BLOCK_N, BLOCK_K // 8, 8)), (BLOCK_N, BLOCK_K))
        q = (words >> shifts[None, :]) & 0xF  # mask after the shift: the arithmetic shift drags the sign bit in
        tile_in = rows_in[:, None] & k_in[None, :]
        group = offs_n[:, None] * (K // GROUP_SIZE) + (k // GROUP_SIZE)[None, :]
        s = tl.load(s_ptr + group, mask=tile_in, other=0.0).to(tl.float32)
        z = tl.load(z_ptr + group, mask=tile_in, other=0).to(tl.int32)
        w = (q - z).to(tl.float32) * s  # the zero point first, in integers; then the scale
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=(offs_m < M)[:, None] & k_in[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(offs_m < M)[:, None] & rows_in[None, :])


def w4a16_gemv(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
               order: str = "sequential") -> torch.Tensor:
    """y (M, N) = x (M, K) @ W.T in x's dtype, W = (q - z) * s dequantized from `packed` (N, K // 8) int32 words
    in `order`, scales (N, K // G) float16, zeros (N, K // G) uint8 (aisys.quant.int4's layout); M in 1..16."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}; got {order!r}")
    for name, tensor in (("x", x), ("packed", packed), ("scales", scales), ("zeros", zeros)):
        tensor_on_triton_device(name, tensor)
        if tensor.ndim != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got shape {tuple(tensor.shape)}")
    M, K = x.shape
    N = packed.shape[0]
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    if not 1 <= M <= MAX_M:
        raise ValueError(f"x must have 1 to {MAX_M} rows (a GEMV or a skinny GEMM), got M = {M}")
    if packed.dtype != torch.int32 or packed.shape[1] * PACK != K or N == 0:
        raise ValueError(f"packed must be int32 words of shape (N, K // 8) = (N, {K // PACK}) for x's K = {K}, got "
                         f"{packed.dtype} of shape {tuple(packed.shape)}")
    if scales.dtype != torch.float16 or scales.shape[0] != N or scales.shape[1] == 0 or K % scales.shape[1] \
            or (K // scales.shape[1]) % PACK:
        raise ValueError(f"scales must be float16 of shape (N, K // G) = ({N}, K // G) with G a multiple of 8 "
                         f"dividing K = {K}, got {scales.dtype} of shape {tuple(scales.shape)}")
    if zeros.dtype != torch.uint8 or zeros.shape != scales.shape:
        raise ValueError(f"zeros must be uint8 of scales' shape {tuple(scales.shape)}, got {zeros.dtype} of shape "
                         f"{tuple(zeros.shape)}")
    x, packed, scales, zeros = x.contiguous(), packed.contiguous(), scales.contiguous(), zeros.contiguous()
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    group_size = K // scales.shape[1]

    def grid(meta):
        return (triton.cdiv(N, meta["BLOCK_N"]),)

    if M == 1 and group_size & (group_size - 1) == 0:  # a power of two: the fast path of one token
        w4a16_gemv_kernel[grid](x, packed, scales, zeros, y, N, K, packed.stride(0), scales.stride(0), MAGIC,
                                GROUP_SIZE=group_size, AWQ=order == "awq",
                                PAIRS=x.dtype == torch.float16 and not interpreted())
    else:
        w4a16_skinny_kernel[grid](x, packed, scales, zeros, y, M, N, K, x.stride(0), y.stride(0),
                                  GROUP_SIZE=group_size, AWQ=order == "awq", BLOCK_M=triton.next_power_of_2(M))
    return y


def pack_codes(q: torch.Tensor, order: str = "sequential") -> torch.Tensor:
    """Codes (N, K) in [0, 15] packed 8 per int32 word along K, on q's device (aisys.quant.int4.pack in torch): the
    word built in int64 and brought to int32 by subtracting 2**32 where bit 31 is set, so nothing overflows."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}; got {order!r}")
    if q.ndim != 2 or q.shape[1] % PACK:
        raise ValueError(f"q must be (N, K) codes with K a multiple of {PACK}, got shape {tuple(q.shape)}")
    j = torch.arange(PACK, device=q.device)
    nibble = j // 2 + 4 * (j % 2) if order == "awq" else j
    words = (q.to(torch.int64).reshape(q.shape[0], -1, PACK) << (4 * nibble)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def random_weights(N: int, K: int, group_size: int = 128, order: str = "sequential", device=None,
                   generator=None):
    """(packed, scales, zeros, w) of a random (N, K) INT4 weight made on `device`: codes and zeros uniform in
    [0, 15], scales in [0.001, 0.003) (weights of about +-0.02, as a trained layer's), and w the same weight
    dequantized to float16, for the fp16 baseline."""
    if K % group_size or group_size % PACK:
        raise ValueError(f"group_size must be a multiple of {PACK} dividing K = {K}, got {group_size}")
    q = torch.randint(0, 16, (N, K), device=device, generator=generator, dtype=torch.int32)
    zeros = torch.randint(0, 16, (N, K // group_size), device=device, generator=generator, dtype=torch.int32)
    scales = (0.001 + 0.002 * torch.rand(N, K // group_size, device=device, generator=generator)).half()
    w = ((q - zeros.repeat_interleave(group_size, 1)).float() * scales.float().repeat_interleave(group_size, 1))
    return pack_codes(q, order), scales, zeros.to(torch.uint8), w.half()


def quantized_weights(w: torch.Tensor, group_size: int = 128, order: str = "sequential"):
    """(packed, scales, zeros) of a (N, K) weight on its device, quantized by aisys.quant.int4 (on the host)."""
    from aisys.quant import int4

    q, scales, zeros = int4.quantize(w.detach().float().cpu().numpy(), group_size)
    return tuple(torch.from_numpy(a).to(w.device) for a in (int4.pack(q, order), scales, zeros))
