"""Tiled GEMM: the bytes each level of the memory hierarchy moves, and the tile sizes that fit an SM.

C (M x N) = A (M x K) @ B (K x N) is computed as in CUTLASS ("Efficient GEMM in CUDA",
NVIDIA/cutlass media/docs): each thread block owns a BM x BN tile of C and steps through K
by BK, staging slabs of A and B in shared memory (`stages` slabs in flight); each warp owns
a WM x WN part of the block tile and loads its operands from shared memory into registers;
each thread, or each MMA instruction, owns a TM x TN part of the warp tile and, at every
step of k, reads TM values of A and TN values of B from registers to do TM x TN
multiply-adds into accumulators that stay in registers (fp32; fp64 for an fp64 GEMM).

Counting. A tile of tm x tn outputs needs, over the whole of K, tm rows of A and tn columns
of B. The tiles of one level form a grid over C with edges at multiples of tm and tn; a tile
that hangs over the edge of C loads only the rows and columns that exist (masked loads), and
a ragged last step of K loads only the k that exist. So every row of A is read once per
column of tiles and every column of B once per row of tiles:

    reads(tm, tn) = M * K * ceil(N / tn) + K * N * ceil(M / tm)    elements,

at the global level (BM, BN: global memory -> shared memory), the shared level (WM, WN:
shared memory -> registers) and the register level (TM, TN: registers -> FMA or MMA units).
C is written to global memory once, M * N elements of the output format. A multiply-add is
two FLOPs, so the work is 2MNK. When tm divides M, tn divides N and K is large, the
intensity at a level tends to

    2MNK / (MNK (1/tn + 1/tm) b) = 2 tm tn / ((tm + tn) b)    FLOP/byte,

t / b for a square tile of side t and b bytes per element: it grows with the tile and
with nothing else. BK and the stages change no count, only the shared memory a block needs.

This counts what each level is asked for, not where it is served from: a global load finds
the panel in L2 when another block loaded it a moment before, so the bytes that come from
DRAM lie between `aisys.roofline.gemm`'s minimum (each element once) and the global count.
"""

from dataclasses import asdict, dataclass, fields

from ._validate import one_of, positive_int, positive_number
from .dtypes import bytes_per_element, canonical
from .roofline import Cost

WARP = 32  # threads per warp
REGISTER_BYTES = 4  # one 32-bit register

# An H100's limits (compute capability 9.0), from the CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability": 228 KB of shared memory per SM, of which one block may
# have 227 KB; 64K 32-bit registers per SM; at most 255 registers per thread, 1024 threads per block.
H100_SHARED_MEMORY_PER_BLOCK = 227 * 1024
H100_SHARED_MEMORY_PER_SM = 228 * 1024
H100_REGISTERS_PER_SM = 64 * 1024
MAX_REGISTERS_PER_THREAD = 255
MAX_THREADS_PER_BLOCK = 1024

LEVELS = ("global", "shared", "register")


@dataclass(frozen=True)
class Tiling:
    """Block tile BM x BN stepping BK through K, warp tile WM x WN, thread (or MMA) tile TM x TN.

    `stages` is the number of BK-deep slabs of A and B that shared memory holds at once
    (2 for double buffering: one being computed on while the next one loads).
    """

    BM: int
    BN: int
    BK: int
    WM: int
    WN: int
    TM: int
    TN: int
    stages: int = 2

    def __post_init__(self):
        for field in fields(self):
            positive_int(field.name, getattr(self, field.name))
        for inner, outer in (("WM", "BM"), ("WN", "BN"), ("TM", "WM"), ("TN", "WN")):
            if getattr(self, outer) % getattr(self, inner):
                raise ValueError(f"{inner} must divide {outer} (the tiles of a level split the tile above it "
                                 f"evenly), got {inner}={getattr(self, inner)}, {outer}={getattr(self, outer)}")

    @property
    def warps(self) -> int:
        """Warps per block: one per warp tile."""
        return (self.BM // self.WM) * (self.BN // self.WN)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.warps * WARP

    def as_dict(self) -> dict:
        """The fields as a plain dict, as a tiling crosses into an exercise."""
        return asdict(self)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)  # exact for any int, where math.ceil(a / b) rounds through a float


def _tiling(tiling) -> Tiling:
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling must be an aisys.gemm_tiling.Tiling, got {type(tiling).__name__}")
    return tiling


def _shape(M, N, K) -> tuple[int, int, int]:
    return positive_int("M", M), positive_int("N", N), positive_int("K", K)


def tile_reads(M: int, N: int, K: int, tile_m: int, tile_n: int) -> int:
    """Elements of A and B that a grid of tile_m x tile_n output tiles loads: M K ceil(N/tile_n) + K N ceil(M/tile_m).

    Each tile loads the rows of A and the columns of B it needs, over the whole of K, and
    only those that exist when it hangs over the edge of C.
    """
    M, N, K = _shape(M, N, K)
    tile_m, tile_n = positive_int("tile_m", tile_m), positive_int("tile_n", tile_n)
    return M * K * _ceil_div(N, tile_n) + K * N * _ceil_div(M, tile_m)


@dataclass(frozen=True)
class Traffic:
    """FLOPs of a tiled GEMM and the bytes crossing each level of the memory hierarchy."""

    flops: int
    global_reads: float  # bytes of A and B loaded from global memory into shared memory
    shared_reads: float  # bytes of A and B loaded from shared memory into registers
    register_reads: float  # bytes of operands the FMA or MMA units read from registers
    c_writes: float  # bytes of C stored to global memory, once

    def cost(self, level: str) -> Cost:
        """The work and the bytes at `level`; 'global' counts C's store with the loads, as DRAM sees both."""
        level = one_of("level", level, LEVELS)
        moved = {"global": self.global_reads + self.c_writes, "shared": self.shared_reads,
                 "register": self.register_reads}[level]
        return Cost(flops=self.flops, bytes=moved)

    def as_dict(self) -> dict:
        """The counts and each level's intensity, as plain data: {'flops', ..., 'global_intensity', ...}."""
        return {**asdict(self), **{f"{level}_intensity": self.cost(level).intensity for level in LEVELS}}


def _out_size(out_dtype) -> float:
    try:
        return bytes_per_element(out_dtype)
    except ValueError as error:
        raise ValueError(f"out_dtype: {error}") from None


def traffic(M: int, N: int, K: int, dtype: str, tiling: Tiling, out_dtype: str | None = None) -> Traffic:
    """Bytes moved at each level by C (M x N) = A (M x K) @ B (K x N) computed with `tiling`.

    A and B are in `dtype`, C in `out_dtype` (default: `dtype`). See the module's docstring
    for how the loads are counted.
    """
    M, N, K = _shape(M, N, K)
    tiling = _tiling(tiling)
    size = bytes_per_element(dtype)
    out_size = size if out_dtype is None else _out_size(out_dtype)
    return Traffic(
        flops=2 * M * N * K,
        global_reads=tile_reads(M, N, K, tiling.BM, tiling.BN) * size,
        shared_reads=tile_reads(M, N, K, tiling.WM, tiling.WN) * size,
        register_reads=tile_reads(M, N, K, tiling.TM, tiling.TN) * size,
        c_writes=M * N * out_size,
    )


def asymptotic_intensity(tile_m: int, tile_n: int, dtype: str) -> float:
    """The intensity a level with tile_m x tile_n tiles tends to for large K and M, N multiples of the tile:
    2 tile_m tile_n / ((tile_m + tile_n) bytes)."""
    tile_m, tile_n = positive_int("tile_m", tile_m), positive_int("tile_n", tile_n)
    return 2 * tile_m * tile_n / ((tile_m + tile_n) * bytes_per_element(dtype))


def accumulator_bytes(dtype: str) -> int:
    """Bytes of one accumulator: 8 for an fp64 GEMM; 4 otherwise (fp32, or int32 for integer formats)."""
    return 8 if canonical(dtype) == "fp64" else 4


@dataclass(frozen=True)
class Resources:
    """What one thread block of a tiling occupies."""

    threads: int
    shared_memory: float  # bytes: `stages` slabs of A (BM x BK) and B (BK x BN)
    accumulator_registers: int  # 32-bit registers per thread that hold its share of the block's C tile

    def as_dict(self) -> dict:
        """The fields as a plain dict."""
        return asdict(self)


def resources(tiling: Tiling, dtype: str) -> Resources:
    """Threads, shared memory and accumulator registers per thread of one block.

    The block's BM x BN accumulators are shared evenly among its threads; a thread cannot hold
    part of a register, so a warp tile smaller than the warp still costs each thread a whole one.
    The accumulators are a lower bound on the registers a thread needs: operand fragments,
    addresses and loop counters come on top.
    """
    tiling = _tiling(tiling)
    slab = tiling.BM * tiling.BK + tiling.BK * tiling.BN  # elements of A and B per stage
    words = tiling.BM * tiling.BN * accumulator_bytes(dtype) // REGISTER_BYTES
    return Resources(
        threads=tiling.threads,
        shared_memory=tiling.stages * slab * bytes_per_element(dtype),
        accumulator_registers=_ceil_div(words, tiling.threads),
    )


def fits(tiling: Tiling, dtype: str, smem_limit: float, regs_limit: int) -> bool:
    """Whether a block needs at most `smem_limit` bytes of shared memory and `regs_limit` accumulators per thread."""
    smem_limit = positive_number("smem_limit", smem_limit)
    regs_limit = positive_int("regs_limit", regs_limit)
    used = resources(tiling, dtype)
    return used.shared_memory <= smem_limit and used.accumulator_registers <= regs_limit


def best_tiling(M: int, N: int, K: int, dtype: str, candidates, smem_limit: float, regs_limit: int) -> Tiling:
    """The candidate of highest global-level intensity among those that fit both limits.

    Ties go to the one with less shared memory (more blocks can share an SM), then to the
    first in `candidates`. Raises ValueError when none fits.
    """
    M, N, K = _shape(M, N, K)
    candidates = list(candidates)
    if not candidates:
        raise ValueError("candidates must hold at least one Tiling, got none")
    for tiling in candidates:
        _tiling(tiling)
    fitting = [t for t in candidates if fits(t, dtype, smem_limit, regs_limit)]
    if not fitting:
        least = min(candidates, key=lambda t: resources(t, dtype).shared_memory)
        raise ValueError(f"no candidate fits smem_limit={smem_limit} bytes and regs_limit={regs_limit}: the one with "
                         f"the least shared memory needs {resources(least, dtype)}")

    def rank(tiling):  # min() keeps the first of equals, which gives the last tie-break
        return (-traffic(M, N, K, dtype, tiling).cost("global").intensity, resources(tiling, dtype).shared_memory)

    return min(fitting, key=rank)


def block_order(tiles_m: int, tiles_n: int, group_m: int) -> list[tuple[int, int]]:
    """The (row, column) of the tile of C that each program computes, in launch order, grouped as in Triton's tutorial.

    Programs sweep `group_m` rows of tiles column by column, then the next `group_m` rows
    (the last group may be shorter); group_m=1 is plain row-major order. Blocks that run
    at the same time then share rows of A and columns of B, which L2 serves after the first load.
    """
    tiles_m, tiles_n = positive_int("tiles_m", tiles_m), positive_int("tiles_n", tiles_n)
    group_m = positive_int("group_m", group_m)
    order = []
    for pid in range(tiles_m * tiles_n):
        per_group = group_m * tiles_n
        first_m = pid // per_group * group_m
        rows = min(tiles_m - first_m, group_m)
        order.append((first_m + pid % per_group % rows, pid % per_group // rows))
    return order


def wave_reads(M: int, N: int, K: int, tiling: Tiling, group_m: int, wave: int) -> int:
    """Elements of A and B read from DRAM, if L2 serves every repeated load within a wave and none across waves.

    Blocks run in waves of `wave` (one per SM when one block fits an SM: 132 on an H100), in
    `block_order(..., group_m)`. Blocks of one wave run side by side through K, so a panel that
    several of them need comes from DRAM once per wave. Between tile_reads(M, N, K, BM, BN)
    (wave=1: no sharing) and M K + K N (one wave covering C: each element once).
    """
    M, N, K = _shape(M, N, K)
    tiling, wave = _tiling(tiling), positive_int("wave", wave)
    order = block_order(_ceil_div(M, tiling.BM), _ceil_div(N, tiling.BN), group_m)
    total = 0
    for start in range(0, len(order), wave):
        blocks = order[start:start + wave]
        rows = sum(min(tiling.BM, M - m * tiling.BM) for m in {m for m, _ in blocks})  # real rows of A loaded
        cols = sum(min(tiling.BN, N - n * tiling.BN) for n in {n for _, n in blocks})  # real columns of B
        total += K * (rows + cols)
    return total


def split_k(M: int, N: int, K: int, dtype: str, tiling: Tiling, splits: int) -> dict:
    """Split-K: `splits` blocks share each output tile, each over a slice of K, and their partial sums are added.

    Returns the blocks launched, the K each one covers, and the extra global traffic of the
    partial sums (CUTLASS's "parallel reduction split-K"): each split writes its M x N partial
    sums, in the accumulator format, to a workspace and a reduction kernel reads them all back.
    """
    M, N, K = _shape(M, N, K)
    tiling = _tiling(tiling)
    splits = positive_int("splits", splits)
    if splits > K:
        raise ValueError(f"splits must be at most K={K} (each split needs some of K), got {splits}")
    tiles = _ceil_div(M, tiling.BM) * _ceil_div(N, tiling.BN)
    return {"blocks": tiles * splits, "k_per_split": _ceil_div(K, splits),
            "workspace_bytes": 0 if splits == 1 else 2 * splits * M * N * accumulator_bytes(dtype)}
