"""Sum and maximum in Triton: of a whole vector (many programs, then one over their partial results) and of each row.

A Triton **program** handles a block of elements at once: `tl.load` of
`BLOCK` offsets, `tl.sum` or `tl.max` over the block. A vector of n elements
is split among many programs so that every multiprocessor works:

    pass 1: program p reduces its chunk (blocks p*bpp .. p*bpp + bpp - 1, bpp blocks a program)
            into partial[p], keeping a BLOCK-wide accumulator and reducing it across lanes once;
    pass 2: one program reduces partial[0 .. programs).

Two passes instead of `tl.atomic_add` into one number: atomics add the
programs' sums in whatever order they finish, so a float sum would change from
run to run; two passes give the same bits every time (and atomic max of floats
does not exist).

The last block of a chunk is partial: `mask=offs < end` keeps its loads in
bounds, and `other=` fills the masked lanes with the **identity** of the
operation, 0 for a sum and -inf for a maximum (0 would win over a row of
negative numbers).

Row reductions run one program per row, looping over the row in blocks of
BLOCK columns, so that any row length fits a fixed block.

Every kernel loads its dtype (float32, float16 or bfloat16), computes in
float32, and stores in the output's dtype, as torch.sum does. The maximum of
no elements raises ValueError (torch raises too); the sum of none is 0. NaN
entries give an unspecified result (the GPU's max instruction ignores NaN).

On a GPU (the fast configuration, `GPU`): pass 1 runs `programs_per_sm`
programs per multiprocessor, each looping over a contiguous chunk of blocks of
`block` elements with `num_warps` warps; all of them are resident at once, so
the loop keeps enough loads in flight to saturate HBM, and the accumulator is
reduced across lanes once per program instead of once per block. The loads are
16 bytes wide when n is a multiple of 16 (Triton then knows the mask is constant
over groups of 16 lanes); other lengths load element by element, more slowly.
"""

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from aisys._validate import positive_int

from ._tensors import float_tensor, interpreted


@dataclass(frozen=True)
class Config:
    """How pass 1 of a vector reduction and the row kernels are launched."""

    block: int  # elements a program loads at once (a power of two)
    num_warps: int  # warps per program: block / (32 * num_warps) elements per thread per load
    programs_per_sm: int  # programs of pass 1 per multiprocessor (the CPU has no SMs: `programs` of them in all)

    def __post_init__(self):
        for name in ("block", "num_warps", "programs_per_sm"):
            positive_int(f"Config.{name}", getattr(self, name))
        if self.block & (self.block - 1):
            raise ValueError(f"Config.block must be a power of two, got {self.block}")


# A GPU: 16 float32 per thread per load (four 16-byte loads), 4 programs of 256 threads per SM. ptxas gives the sum
# kernel 40 registers per thread for sm_90a, so 4 programs (40 K of an H100 SM's 64 K registers) are all resident at
# once, with 64 KB of loads in flight per SM: no second wave of late programs, and enough bytes in flight to cover
# the latency of HBM (about 20 KB per SM at 3.35 TB/s).
GPU = Config(block=4096, num_warps=8, programs_per_sm=4)
# The interpreter: few, small programs (each costs about half a millisecond).
CPU = Config(block=256, num_warps=4, programs_per_sm=16)
FINAL_BLOCK = 1024  # pass 2: one program over the partial results
MAX_ELEMENTS = 2**30  # offsets are 32-bit: the last chunk, which may reach up to n past the end, stays below 2**31


def default_config() -> Config:
    return CPU if interpreted() else GPU


@functools.cache
def _sm_count() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


@triton.jit
def reduce_kernel(x_ptr, out_ptr, n, blocks_per_program, BLOCK: tl.constexpr, IS_MAX: tl.constexpr):
    """out[p] = the sum (or max) of x[p * B : (p + 1) * B] with B = blocks_per_program * BLOCK, in float32."""
    pid = tl.program_id(0)
    start = pid * blocks_per_program * BLOCK
    end = tl.minimum(start + blocks_per_program * BLOCK, n)
    # One accumulator per lane: the cross-lane tl.sum/tl.max (shuffles and shared memory) runs once per program.
    if IS_MAX:
        acc = tl.full([BLOCK], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
    for block_start in range(start, end, BLOCK):
        offs = block_start + tl.arange(0, BLOCK)
        mask = offs < end  # the chunk's last block may be partial
        if IS_MAX:
            x = tl.load(x_ptr + offs, mask=mask, other=float("-inf"))  # -inf: the identity of max
            acc = tl.maximum(acc, x.to(tl.float32))
        else:
            x = tl.load(x_ptr + offs, mask=mask, other=0.0)  # 0: the identity of +
            acc += x.to(tl.float32)
    if IS_MAX:
        result = tl.max(acc, axis=0)
    else:
        result = tl.sum(acc, axis=0)
    tl.store(out_ptr + pid, result.to(out_ptr.dtype.element_ty))


@triton.jit
def row_reduce_kernel(a_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr, IS_MAX: tl.constexpr):
    """out[r] = the sum (or max) of row r of a, one program per row, BLOCK columns at a time."""
    row = tl.program_id(0).to(tl.int64)  # row * row_stride may pass 2**31 in a large matrix
    a_row = a_ptr + row * row_stride
    if IS_MAX:
        acc = tl.full([BLOCK], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
    for col in range(0, n_cols, BLOCK):  # ceil(n_cols / BLOCK) blocks, the last one partial
        offs = col + tl.arange(0, BLOCK)
        mask = offs < n_cols
        if IS_MAX:
            acc = tl.maximum(acc, tl.load(a_row + offs, mask=mask, other=float("-inf")).to(tl.float32))
        else:
            acc += tl.load(a_row + offs, mask=mask, other=0.0).to(tl.float32)
    if IS_MAX:
        result = tl.max(acc, axis=0)
    else:
        result = tl.sum(acc, axis=0)
    tl.store(out_ptr + tl.program_id(0), result.to(out_ptr.dtype.element_ty))


def _launch_plan(n: int, config: Config) -> tuple[int, int]:
    """(programs, blocks per program) of pass 1 over n elements."""
    blocks = triton.cdiv(n, config.block)
    most = config.programs_per_sm * (1 if interpreted() else _sm_count())
    blocks_per_program = triton.cdiv(blocks, min(blocks, most))
    return triton.cdiv(blocks, blocks_per_program), blocks_per_program


def _reduce(x: torch.Tensor, is_max: bool, config: Config | None) -> torch.Tensor:
    config = config or default_config()
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"x must have at most {MAX_ELEMENTS} elements (32-bit offsets), got {x.numel()}")
    programs, blocks_per_program = _launch_plan(x.numel(), config)
    partial = torch.empty(programs, device=x.device, dtype=torch.float32)
    reduce_kernel[(programs,)](x, partial, x.numel(), blocks_per_program,
                               BLOCK=config.block, IS_MAX=is_max, num_warps=config.num_warps)
    out = torch.empty((), device=x.device, dtype=x.dtype)
    reduce_kernel[(1,)](partial, out, programs, triton.cdiv(programs, FINAL_BLOCK),
                        BLOCK=FINAL_BLOCK, IS_MAX=is_max, num_warps=4)
    return out


def vector_sum(x: torch.Tensor, config: Config | None = None) -> torch.Tensor:
    """The sum of the 1-D tensor x, a 0-d tensor of x's dtype (added in float32; 0 for an empty x)."""
    x = float_tensor("x", x, 1)
    if x.numel() == 0:
        return torch.zeros((), device=x.device, dtype=x.dtype)
    return _reduce(x, False, config)


def vector_max(x: torch.Tensor, config: Config | None = None) -> torch.Tensor:
    """The largest element of the 1-D tensor x, a 0-d tensor of x's dtype; ValueError for an empty x."""
    x = float_tensor("x", x, 1)
    if x.numel() == 0:
        raise ValueError("x must have at least one element: the maximum of no elements is undefined")
    return _reduce(x, True, config)


def _rows(a: torch.Tensor, is_max: bool, config: Config | None) -> torch.Tensor:
    config = config or default_config()
    rows, cols = a.shape
    out = torch.empty(rows, device=a.device, dtype=a.dtype)
    if rows == 0:
        return out
    if cols == 0:
        if is_max:
            raise ValueError(f"a must have at least one column: the maximum of an empty row is undefined "
                             f"(a has shape {tuple(a.shape)})")
        return out.zero_()
    block = min(config.block, triton.next_power_of_2(cols))  # no lanes wasted on a short row
    num_warps = max(1, min(config.num_warps, block // 256))  # at least 8 elements per thread
    row_reduce_kernel[(rows,)](a, out, cols, a.stride(0), BLOCK=block, IS_MAX=is_max, num_warps=num_warps)
    return out


def row_sums(a: torch.Tensor, config: Config | None = None) -> torch.Tensor:
    """The sum of each row of the 2-D tensor a, of shape (rows,) and a's dtype (zeros when a has no columns)."""
    return _rows(float_tensor("a", a, 2), False, config)


def row_max(a: torch.Tensor, config: Config | None = None) -> torch.Tensor:
    """The largest element of each row of the 2-D tensor a, of shape (rows,); ValueError when a has no columns."""
    return _rows(float_tensor("a", a, 2), True, config)
