"""W4A16 in Triton: y = x @ W.T with W stored as 4-bit codes packed 8 per int32 word, dequantized in registers.

The layout is aisys.quant.int4's: packed (N, K // 8) int32 words along K (sequential or AWQ nibble order), scales
(N, K // G) float16 and zero points (N, K // G) uint8 in [0, 15], one per group of G inputs; x (M, K) with M from
1 (a decode step) to 16 (a small batch), float16, bfloat16 or float32; y (M, N) in x's dtype.

At M = 1 the product is all memory traffic: 2 FLOPs per weight against half a byte of it, far left of any GPU's
ridge point, so `w4a16_gemv_kernel` is built to stream the packed words at the copy bandwidth. That takes more than
wide loads: an H100 reads about 6e12 packed weights a second, and its SMs issue about 4e13 instructions a second
(132 SMs x 4 schedulers x 32 lanes x 1.75-1.98 GHz), so unpacking may cost only a handful of instructions a weight.
Each program owns BLOCK_N output rows and walks K, GROUPS groups of G inputs at a time:

- the words of a tile, (BLOCK_N, GROUPS, G / 8), are contiguous along K in each row, loaded 16 bytes (4 words) per
  thread and software-pipelined `STAGES` tiles ahead (asynchronous copies through shared memory, `tl.range`'s
  num_stages): the bytes in flight that hide the memory's latency;
- each code becomes a float without an int-to-float conversion (the CUDA C++ Programming Guide's throughput table
  lists 16 conversions per clock per SM on compute capability 9.0 against 128 FP32 operations; not checked here):
  for the nibble at bits 4 s of a 16-bit half of the word, (half & (0xF << 4 s)) | MAGIC_s, with MAGIC_s the exponent
  bits of 2^(23 - 4 s), is the float 2^(23 - 4 s) + q, exactly (FasterTransformer's trick in float32, the nibble
  left in place); subtracting 2^(23 - 4 s) + z gives q - z exactly. Per weight: one LOP3, one FADD, one FFMA with
  x; per word, one shift for its upper half. MAGIC is a runtime argument so that the compiler keeps it in a register
  instead of folding it into each mask (which costs a MOV of a constant per weight);
- x's 8 inputs of each word are loaded as one 16-byte vector (from the L1 and L2 caches: 2 bytes per input against
  BLOCK_N / 2 bytes of weights), converted to float32 once and split in registers (tl.split) into the 8 elements;
  the products are summed per (row, group, word) in float32 registers, scaled by the group's scale once per word,
  and reduced across threads once, at the end;
- the grid is cdiv(N, BLOCK_N) programs; GROUPS spreads a row over more threads (4 per group of 128) so that small
  N still gives every SM several warps, instead of splitting K (which needs a zeroed buffer and atomics or a second
  pass: more launches, microseconds against a kernel of under ten).

The hot loop was checked in the SASS compiled for sm_90 on a CPU (aisys.triton_compile): no spills, 16-byte
LDGSTS for the words, about 4.3 to 5.7 instructions per weight (the configs' comment; tests/test_quant_int4.py
keeps one under 6). `w4a16_skinny_kernel` is the general kernel for M from 2 to 16 and for group sizes that are
not powers of two: it broadcasts each word to its 8 codes, shifts and masks,
dequantizes (q - z) s in float32 and sums x w along K. Block sizes, warps and pipeline depth are autotuned per
shape on a GPU; Triton's interpreter (a CPU) runs one small tile, for correctness checks.
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


GEMV_CONFIGS = [  # (BLOCK_N, GROUPS, warps, stages): registers 48 to 168 a thread, 4.3 to 5.7 instructions a weight
    _gemv_config(32, 1, 4, 4), _gemv_config(32, 1, 4, 6), _gemv_config(64, 1, 4, 4), _gemv_config(64, 1, 4, 6),
    _gemv_config(128, 1, 8, 3), _gemv_config(16, 1, 2, 4), _gemv_config(16, 2, 2, 4), _gemv_config(32, 1, 2, 4),
    _gemv_config(32, 2, 4, 4), _gemv_config(16, 4, 4, 4), _gemv_config(16, 4, 8, 3), _gemv_config(64, 2, 4, 3),
]
GEMV_INTERPRETER_CONFIGS = [_gemv_config(16, 2, 4, 1)]


def _prune_gemv(configs, named_args, **kwargs):
    """Configs whose GROUPS fit K's groups and whose pipeline fits the shared memory."""
    groups = named_args["K"] // kwargs["GROUP_SIZE"]
    fitting = [c for c in configs if c.kwargs["GROUPS"] <= groups
               and c.kwargs["STAGES"] * c.kwargs["BLOCK_N"] * c.kwargs["GROUPS"] * kwargs["GROUP_SIZE"] // 2
               <= SMEM_BYTES]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_N"] * c.kwargs["GROUPS"])]


@triton.autotune(configs=GEMV_INTERPRETER_CONFIGS if interpreted() else GEMV_CONFIGS,
                 key=["N", "K", "GROUP_SIZE", "AWQ"], prune_configs_by={"early_config_prune": _prune_gemv})
@triton.heuristics({"EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,
                    "EVEN_GROUPS": lambda args: (args["K"] // args["GROUP_SIZE"]) % args["GROUPS"] == 0})
@triton.jit
def w4a16_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, N, K, stride_wn, stride_sn, magic,
                      GROUP_SIZE: tl.constexpr, AWQ: tl.constexpr, BLOCK_N: tl.constexpr, GROUPS: tl.constexpr,
                      STAGES: tl.constexpr, EVEN_N: tl.constexpr, EVEN_GROUPS: tl.constexpr):
    """y[0, n] for rows n in [pid * BLOCK_N, + BLOCK_N), x of one row; G a power of two >= 8 (see the module)."""
    WORDS: tl.constexpr = GROUP_SIZE // 8
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_g = tl.arange(0, GROUPS)
    offs_w = tl.arange(0, WORDS)
    n3 = offs_n[:, None, None]
    g3 = offs_g[None, :, None]
    w_ptrs = w_ptr + n3.to(tl.int64) * stride_wn + g3 * WORDS + offs_w[None, None, :]  # (BLOCK_N, GROUPS, WORDS)
    s_ptrs = s_ptr + n3 * stride_sn + g3  # (BLOCK_N, GROUPS, 1): one scale and zero per row and group
    z_ptrs = z_ptr + n3 * stride_sn + g3
    # x's inputs of the tile as (GROUPS, WORDS, 8): the 8 inputs of each word, contiguous
    x_ptrs = x_ptr + offs_g[:, None, None] * GROUP_SIZE + offs_w[None, :, None] * 8 + tl.arange(0, 8)[None, None, :]
    total_groups = K // GROUP_SIZE
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    for g0 in tl.range(0, total_groups, GROUPS, num_stages=STAGES):
        if EVEN_N and EVEN_GROUPS:
            words = tl.load(w_ptrs + g0 * WORDS)
            s = tl.load(s_ptrs + g0).to(tl.float32)
            z = tl.load(z_ptrs + g0).to(tl.float32)
            x_in = offs_g[:, None, None] >= 0
        else:
            tile_in = (n3 < N) & (g0 + g3 < total_groups)
            words = tl.load(w_ptrs + g0 * WORDS, mask=tile_in, other=0)
            s = tl.load(s_ptrs + g0, mask=tile_in, other=0.0).to(tl.float32)
            z = tl.load(z_ptrs + g0, mask=tile_in, other=0).to(tl.float32)
            x_in = (g0 + offs_g < total_groups)[:, None, None]
        high = words >> 16  # nibbles 4..7 at bits 0..15 (bits above are the sign's: every mask below clears them)
        # x in float32, split in registers into its 8 elements of every word: j = 4a + 2b + c
        x = tl.load(x_ptrs + g0 * GROUP_SIZE, mask=x_in, other=0.0).to(tl.float32)
        even, odd = tl.split(tl.reshape(x, (GROUPS, WORDS, 2, 2, 2)))  # c
        x04, x26 = tl.split(even)  # b
        x15, x37 = tl.split(odd)
        x0, x4 = tl.split(x04)  # a
        x2, x6 = tl.split(x26)
        x1, x5 = tl.split(x15)
        x3, x7 = tl.split(x37)
        xs = (x0, x1, x2, x3, x4, x5, x6, x7)
        t = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
        for j in tl.static_range(8):  # element j of every word
            if AWQ:
                position = j // 2 + (j % 2) * 4
            else:
                position = j
            slot = position % 4  # the nibble's place in its 16-bit half
            half = high if position >= 4 else words
            # exponent of 2^(23 - 4 slot): the nibble's lowest bit weighs 1, the float is 2^(23 - 4 slot) + q
            f = ((half & (0xF << (4 * slot))) | (magic - slot * 0x2000000)).to(tl.float32, bitcast=True)
            t += (f - (z + (1 << (23 - 4 * slot)))) * xs[j][None, :, :]  # (q - z) x, exactly up to the product
        acc += t * s
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
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
                                GROUP_SIZE=group_size, AWQ=order == "awq")
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
