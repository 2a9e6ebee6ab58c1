# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the memory traffic of a tiled GEMM
#
# **You will learn** to count the bytes a tiled matrix multiply moves at each level of a
# GPU's memory hierarchy, why the reuse of every loaded value grows with the tile and with
# nothing else, why the thread block's tile is limited by shared memory and the thread's
# tile by registers, and how to choose the tiling that moves the fewest bytes within both
# limits.
#
# $C = AB$ with $A$ of shape $M \times K$ and $B$ of shape $K \times N$ does $2MNK$ FLOPs
# (a multiply-add is two). Computed naively, every multiply-add loads its two operands from
# memory: in bf16 that is 4 bytes per 2 FLOPs, an intensity of 0.5 FLOP/byte, against the
# 295 FLOP/byte an H100 SXM5 needs to keep its Tensor Cores busy (989.4 TFLOP/s dense bf16
# over 3.35 TB/s of HBM3). The cure is **reuse**: a value loaded once into fast memory
# serves many multiply-adds. CUTLASS ("Efficient GEMM in CUDA", in its documentation) and
# every fast GEMM organise that reuse as a hierarchy of tiles:
#
# ```
# for each BM x BN tile of C, in parallel:                # a thread block
#     acc = zeros(BM, BN)                                 # fp32 accumulators, in registers
#     for k0 in range(0, K, BK):                          # the main loop
#         A[rows, k0:k0+BK], B[k0:k0+BK, cols] -> shared  # global -> shared memory
#         for each WM x WN tile of the block, in parallel:    # a warp
#             for k in range(k0, k0 + BK):
#                 A[warp rows, k], B[k, warp cols] -> registers      # shared -> registers
#                 for each TM x TN tile of the warp, in parallel:    # a thread, or one MMA instruction
#                     acc[TM x TN] += A[TM rows, k] * B[k, TN cols]  # registers -> FMA or MMA units
#     C[rows, cols] = acc                                 # C stored once
# ```
#
# `stages` slabs of A and B sit in shared memory at once, so that the next ones load while
# the current ones are used (2 stages: double buffering).
#
# **How to count.** A tile of $t_m \times t_n$ outputs needs, over the whole of $K$, $t_m$
# rows of $A$ and $t_n$ columns of $B$. The tiles of one level form a grid over $C$ whose
# edges fall at multiples of $t_m$ and $t_n$. A tile that hangs over the edge of $C$ loads
# only the rows and columns that exist (masked loads), and a last, partial step of $K$ only
# the $k$ that exist. So each row of $A$ is loaded once per *column* of tiles and each column
# of $B$ once per *row* of tiles:
#
# $$\text{reads}(t_m, t_n) = M K \left\lceil N / t_n \right\rceil
#   + K N \left\lceil M / t_m \right\rceil \text{ elements.}$$
#
# The same formula counts every level: block tiles ($BM, BN$) for global → shared, warp
# tiles ($WM, WN$) for shared → registers, thread tiles ($TM, TN$) for the operands the FMA
# or MMA units read from registers. Write the functions yourself: when grading,
# `aisys.gemm_tiling` (the reference) cannot be imported. `bytes_per_element` (exercise 1.1)
# is given.

# %%
import math

from aisys.dtypes import bytes_per_element
from aisys_grader import checker

check = checker("03-tensor-cores/gemm_tiling", globals())

print({dtype: bytes_per_element(dtype) for dtype in ["fp64", "fp32", "bf16", "fp8_e4m3", "int8", "int4"]})

# %% [markdown]
# ## 1. Loads by a grid of tiles
#
# Return $\text{reads}(t_m, t_n)$ for a grid of `tile_m` x `tile_n` tiles, as an integer
# number of elements. Check yourself: with 1 x 1 tiles every multiply-add loads its two
# operands ($2MNK$); with one tile as large as $C$, $A$ and $B$ are loaded once ($MK + KN$).
# The checks reach $2^{16}$ x $2^{16}$ outputs in 1 x 1 tiles, $2^{32}$ tiles, which no loop over
# the tiles can visit in time: use the formula, in integers (past $2^{53}$ a float is not exact).

# %% tags=["solution"]
def tile_reads(M: int, N: int, K: int, tile_m: int, tile_n: int) -> int:
    """Elements of A and B loaded by a grid of tile_m x tile_n tiles covering C (M x N), over the whole of K."""
    ### BEGIN SOLUTION
    return M * K * math.ceil(N / tile_n) + K * N * math.ceil(M / tile_m)
    ### END SOLUTION


# %% tags=["check"]
check("tile_reads")
### BEGIN HIDDEN TESTS
check("tile_reads", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Traffic at each level
#
# A tiling is a dict with the keys `BM, BN, BK, WM, WN, TM, TN, stages` (each tile divides
# the one above it). Return a dict with
#
# - `flops`: $2MNK$;
# - `global_reads`, `shared_reads`, `register_reads`: bytes of A and B loaded at each level
#   (block, warp and thread tiles), in `dtype`;
# - `c_writes`: bytes of C stored once, in `out_dtype` (in `dtype` when `out_dtype` is None);
# - `global_intensity` $= \text{flops} / (\text{global\_reads} + \text{c\_writes})$, since
#   global memory sees C's stores too, and `shared_intensity`, `register_intensity`:
#   flops over that level's reads.
#
# When $t_m$ divides $M$, $t_n$ divides $N$ and $K$ is large, a level's intensity is
# $2MNK / (MNK(1/t_n + 1/t_m)\,b) = 2 t_m t_n / ((t_m + t_n)\, b)$ FLOP/byte for $b$ bytes
# per element: $t / b$ for a square tile of side $t$. It grows with the tile, and neither
# $BK$ nor the stages change it.

# %% tags=["solution"]
def traffic(M: int, N: int, K: int, dtype: str, tiling: dict, out_dtype: str | None = None) -> dict:
    """FLOPs, bytes moved at each level, C's store and each level's intensity for a tiled GEMM."""
    ### BEGIN SOLUTION
    size = bytes_per_element(dtype)
    flops = 2 * M * N * K
    reads = {level: tile_reads(M, N, K, tiling[tm], tiling[tn]) * size
             for level, tm, tn in [("global", "BM", "BN"), ("shared", "WM", "WN"), ("register", "TM", "TN")]}
    c_writes = M * N * bytes_per_element(out_dtype or dtype)
    return {"flops": flops, "global_reads": reads["global"], "shared_reads": reads["shared"],
            "register_reads": reads["register"], "c_writes": c_writes,
            "global_intensity": flops / (reads["global"] + c_writes),
            "shared_intensity": flops / reads["shared"], "register_intensity": flops / reads["register"]}
    ### END SOLUTION


# %% tags=["check"]
check("traffic")
### BEGIN HIDDEN TESTS
check("traffic", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Where does a block tile put an 8192³ GEMM?
#
# Square block tiles of growing side $t$ on an 8192 x 8192 x 8192 bf16 GEMM, against the
# H100's ridge point. Before you run it: which side reaches 295 FLOP/byte? Then set
# `N = 1` (a GEMV, as when a language model decodes one token) and run it again.

# %%
M = N = K = 8192
ridge = 989.4e12 / 3.35e12
for side in [16, 32, 64, 128, 256, 512]:
    square = {"BM": side, "BN": side, "BK": 32, "WM": side, "WN": side, "TM": side, "TN": side, "stages": 2}
    intensity = traffic(M, N, K, "bf16", square)["global_intensity"]
    print(f"block tile {side:3} x {side:<3}: {intensity:7.1f} FLOP/byte, "
          f"{'above' if intensity >= ridge else 'below'} the H100's ridge point of {ridge:.0f}")

# %% [markdown]
# No tile a block can hold reaches the ridge: a 128 x 128 bf16 tile gives 64 FLOP/byte.
# Real kernels still run near the peak because the global level's loads are served from
# the 50 MB L2 cache when another block loaded the same panel a moment before; only the
# first load of each panel comes from HBM. The tiling page of this chapter follows that
# thread. A GEMV stays near 1 FLOP/byte in bf16 whatever the tiling: each element of $A$
# is used by one multiply-add only.
#
# ## 3. What a block occupies
#
# Return a dict for one thread block:
#
# - `threads`: one warp of 32 threads per warp tile, $(BM / WM)(BN / WN) \cdot 32$;
# - `shared_memory`: bytes of `stages` slabs of A ($BM \times BK$) and B ($BK \times BN$) in `dtype`;
# - `accumulator_registers`: 32-bit registers per thread that hold the block's $BM \times BN$
#   accumulators, shared evenly among its threads. Accumulators are fp32 whatever the input
#   format (int32 for integer formats), so one register each, but fp64 in an fp64 GEMM, two
#   registers each. A thread cannot hold part of a register: round up.
#
# On an H100 a block may use up to 227 KB of shared memory and a thread up to 255 registers
# (CUDA C++ Programming Guide, compute capability 9.0). Accumulators are only part of what
# a thread needs: operand fragments, addresses and counters take registers too.

# %% tags=["solution"]
def resources(tiling: dict, dtype: str) -> dict:
    """Threads, shared memory (bytes) and accumulator registers per thread of one thread block."""
    ### BEGIN SOLUTION
    threads = (tiling["BM"] // tiling["WM"]) * (tiling["BN"] // tiling["WN"]) * 32
    slab = tiling["BM"] * tiling["BK"] + tiling["BK"] * tiling["BN"]
    registers_per_accumulator = 2 if dtype == "fp64" else 1
    return {"threads": threads,
            "shared_memory": tiling["stages"] * slab * bytes_per_element(dtype),
            "accumulator_registers": math.ceil(tiling["BM"] * tiling["BN"] * registers_per_accumulator / threads)}
    ### END SOLUTION


# %% tags=["check"]
check("resources")
### BEGIN HIDDEN TESTS
check("resources", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The best tiling that fits
#
# Among `candidates` (a list of tiling dicts), return the one of highest
# `global_intensity` among those whose shared memory is at most `smem_limit` bytes and
# whose accumulator registers are at most `regs_limit` per thread (a candidate exactly at a
# limit fits). Break ties by less shared memory (more blocks can then share an SM), then by
# the order of the list (the first wins). Return the candidate itself, or `None` when none
# fits.

# %% tags=["solution"]
def best_tiling(M: int, N: int, K: int, dtype: str, candidates: list, smem_limit: float, regs_limit: int):
    """The fitting candidate of highest global intensity (ties: less shared memory, then first), or None."""
    ### BEGIN SOLUTION
    def fits(tiling):
        used = resources(tiling, dtype)
        return used["shared_memory"] <= smem_limit and used["accumulator_registers"] <= regs_limit

    def rank(tiling):  # min() keeps the first of equal ranks
        return -traffic(M, N, K, dtype, tiling)["global_intensity"], resources(tiling, dtype)["shared_memory"]

    fitting = [tiling for tiling in candidates if fits(tiling)]
    return min(fitting, key=rank) if fitting else None
    ### END SOLUTION


# %% tags=["check"]
check("best_tiling")
### BEGIN HIDDEN TESTS
check("best_tiling", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Choosing tiles for an H100
#
# A few tilings of real kernels: CUTLASS's default SIMT SGEMM (128 x 128 x 8, warp 32 x 64,
# 8 x 8 per thread), its default Ampere Tensor Core GEMM (128 x 256 x 64, warp 64 x 64, the
# 16 x 8 tile of one `mma.sync` instruction, 3 stages), and two more. Which one wins for a
# large GEMM, and which for a GEMM with 16 rows (16 tokens through a layer)? Shrink
# `smem_limit` to an A100's 163 KB per block, or `regs_limit` to 64, and watch the choice move.

# %%
candidates = {
    "CUTLASS SIMT 128x128x8": {"BM": 128, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "TM": 8, "TN": 8, "stages": 2},
    "CUTLASS sm80 128x256x64": {"BM": 128, "BN": 256, "BK": 64, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 3},
    "256x128x64, 4 stages": {"BM": 256, "BN": 128, "BK": 64, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 4},
    "16x256x64 (skinny)": {"BM": 16, "BN": 256, "BK": 64, "WM": 16, "WN": 64, "TM": 16, "TN": 8, "stages": 3},
}
smem_limit, regs_limit = 227 * 1024, 255
for name, tiling in candidates.items():
    used = resources(tiling, "bf16")
    print(f"{name:26} {used['threads']:4} threads {used['shared_memory'] / 1024:6.0f} KiB "
          f"{used['accumulator_registers']:4} accumulators/thread")
for M, N, K in [(8192, 8192, 8192), (16, 8192, 8192), (1000, 3000, 500)]:
    best = best_tiling(M, N, K, "bf16", list(candidates.values()), smem_limit, regs_limit)
    name = next((n for n, t in candidates.items() if t == best), None)
    intensity = traffic(M, N, K, "bf16", best)["global_intensity"] if best else float("nan")
    print(f"M, N, K = {M}, {N}, {K}: {name} ({intensity:.1f} FLOP/byte at the global level)")
