"""W4A16 in Triton: y = x @ W.T with W stored as 4-bit codes packed 8 per int32 word, dequantized in registers.

The layout is aisys.quant.int4's: packed (N, K // 8) int32 words along K (sequential or AWQ nibble order), scales
(N, K // G) float16 and zero points (N, K // G) uint8 in [0, 15], one per group of G inputs; x (M, K) with M from
1 (a decode step) to 16 (a small batch), float16, bfloat16 or float32; y (M, N) in x's dtype.

At M = 1 the product is all memory traffic: 2 FLOPs per weight against half a byte of it, far left of any GPU's
ridge point. So the kernel is built to stream the packed words at the copy bandwidth:

- each program owns BLOCK_N output rows and walks the whole of K, BLOCK_K inputs (BLOCK_K // 8 words, contiguous
  per row) at a time: a row of a tile is 64 to 256 contiguous bytes, loaded 16 bytes (4 words) per thread, and no
  program re-reads a word. `num_stages` keeps the next tiles' loads in flight while this one is unpacked;
- the words are unpacked in registers: each is broadcast to its 8 codes, shifted right by 4 x its nibble position
  and masked with 0xF (the shift is arithmetic: a word whose top nibble is >= 8 is negative, and the mask clears the
  ones it shifts in), then w = (q - z) * s in float32, multiplied with x and summed along K into a float32
  accumulator (CUDA cores: at M <= 16 the Tensor Cores would wait on memory anyway);
- a program reads x's BLOCK_K inputs for each tile (from the L2 cache, 2 bytes per input against BLOCK_N / 2 bytes
  of weights) and a scale and zero per row and group (one load per row when BLOCK_K divides G);
- the grid is cdiv(N, BLOCK_N) programs: 8 to 64 rows each give 172 to 1376 programs at N = 11008, several per SM
  of an H100's 132, so K is not split (split-K would need a zeroed float32 buffer and atomics: two more launches,
  a few microseconds against a kernel of under ten).

The tile sizes, warps and pipeline depth are autotuned per (M, N, K, group size) on a GPU; Triton's interpreter
(a CPU) runs one small tile, for correctness checks.
"""

import torch
import triton
import triton.language as tl

from aisys.triton_kernels._tensors import FLOAT_DTYPES, interpreted, tensor_on_triton_device

PACK = 8  # codes per int32 word
MAX_M = 16  # a skinny product: beyond a few rows of x a Tensor Core GEMM (dequantize, then tl.dot) wins
ORDERS = ("sequential", "awq")


def _config(n, k, warps, stages):
    return triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=warps, num_stages=stages)


GPU_CONFIGS = [
    _config(8, 256, 2, 3), _config(8, 512, 4, 3), _config(8, 1024, 4, 2), _config(8, 128, 4, 4),
    _config(16, 128, 2, 4), _config(16, 256, 4, 3), _config(16, 256, 4, 4), _config(16, 512, 4, 3),
    _config(16, 512, 8, 3), _config(16, 1024, 8, 2),
    _config(32, 128, 4, 4), _config(32, 256, 4, 3), _config(32, 256, 8, 3), _config(32, 512, 8, 2),
    _config(64, 128, 4, 3), _config(64, 256, 8, 3),
]
INTERPRETER_CONFIGS = [_config(16, 64, 4, 1)]  # the interpreter runs a program in ~1 ms whatever its tile
MOST_PRODUCTS = 16384  # BLOCK_M x BLOCK_N x BLOCK_K float32 products per program: 128 registers a thread at 4 warps


def _prune(configs, named_args, **kwargs):
    """The configs whose x-by-w products fit the registers at this M (BLOCK_M = the next power of 2 of M)."""
    block_m = triton.next_power_of_2(named_args["M"])
    fitting = [c for c in configs if block_m * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"] <= MOST_PRODUCTS]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"])]


@triton.autotune(configs=INTERPRETER_CONFIGS if interpreted() else GPU_CONFIGS, key=["M", "N", "K", "GROUP_SIZE"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def w4a16_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                      GROUP_SIZE: tl.constexpr, AWQ: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """Rows [pid * BLOCK_N, + BLOCK_N) of y (M, N) = x (M, K) @ W.T, W from packed (N, K // 8) int32 words."""
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    rows_in = offs_n < N
    words_per_row = K // 8
    groups_per_row = K // GROUP_SIZE
    # Element j of a word sits at nibble j (sequential) or at AWQ's (j // 2) + 4 (j % 2): 0, 4, 1, 5, 2, 6, 3, 7
    j = offs_k % 8
    if AWQ:
        shifts = ((j // 2) + (j % 2) * 4) * 4
    else:
        shifts = j * 4
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * words_per_row
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        words_at = w_rows + (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :]
        x_at = x_ptr + offs_m[:, None] * stride_xm + k[None, :]
        if EVEN_K:  # no mask along K: loads of whole 16-byte vectors
            k_in = offs_k >= 0
            words = tl.load(words_at, mask=rows_in[:, None], other=0)
            x = tl.load(x_at, mask=(offs_m < M)[:, None], other=0.0).to(tl.float32)
        else:
            k_in = k < K
            words_in = (k0 // 8 + tl.arange(0, BLOCK_K // 8)) < words_per_row
            words = tl.load(words_at, mask=rows_in[:, None] & words_in[None, :], other=0)
            x = tl.load(x_at, mask=(offs_m < M)[:, None] & k_in[None, :], other=0.0).to(tl.float32)
        tile_in = rows_in[:, None] & k_in[None, :]
        # (BLOCK_N, BLOCK_K // 8) words, one load each, each broadcast to its 8 codes
        words = tl.reshape(tl.broadcast_to(words[:, :, None], (BLOCK_N, BLOCK_K // 8, 8)), (BLOCK_N, BLOCK_K))
        q = (words >> shifts[None, :]) & 0xF  # mask after the shift: the arithmetic shift drags the sign bit in
        if GROUP_SIZE % BLOCK_K == 0:  # the tile lies in one group: one scale and zero per row
            g = k0 // GROUP_SIZE
            s = tl.load(s_ptr + offs_n * groups_per_row + g, mask=rows_in, other=0.0).to(tl.float32)[:, None]
            z = tl.load(z_ptr + offs_n * groups_per_row + g, mask=rows_in, other=0).to(tl.int32)[:, None]
        else:
            g = (k // GROUP_SIZE)[None, :]
            s = tl.load(s_ptr + offs_n[:, None] * groups_per_row + g, mask=tile_in, other=0.0).to(tl.float32)
            z = tl.load(z_ptr + offs_n[:, None] * groups_per_row + g, mask=tile_in, other=0).to(tl.int32)
        w = (q - z).to(tl.float32) * s  # the zero point first, in integers; then the scale
        if BLOCK_M == 1:
            acc += tl.sum(w * x, axis=1)[None, :]
        else:
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

    def grid(meta):
        return (triton.cdiv(N, meta["BLOCK_N"]),)

    w4a16_gemv_kernel[grid](x, packed, scales, zeros, y, M, N, K, x.stride(0), y.stride(0),
                            GROUP_SIZE=K // scales.shape[1], AWQ=order == "awq",
                            BLOCK_M=triton.next_power_of_2(M))
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
