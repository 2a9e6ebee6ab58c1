"""Checks: the loads of a tiled GEMM at each level, a block's resources, the best tile.

Tilings cross the bridge as dicts with the fields of `aisys.gemm_tiling.Tiling`. Visible
cases are few and fixed; hidden ones draw sizes (ragged, and 1), tilings and formats (every
one, int4 included) from the seed, and add fixed cases on the boundary of each rule: a tile
larger than C, sizes one past a multiple of the tile, a warp tile smaller than a warp, a
candidate that fits only if the stages are forgotten, a tie in intensity.

A failure says which case, what differed, and what that difference usually means; where the function
rests on another the student wrote (traffic on tile_reads, best_tiling on traffic and resources) and that one
is wrong on the case, it says so. tile_reads and traffic must count in closed form: each is timed on sizes
that grow to 2^32 tiles, which a loop over the tiles is stopped on at the first size it takes over 0.1 s for.
"""

import math

from aisys import dtypes, gemm_tiling
from aisys.gemm_tiling import Tiling, fits

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, redacting
from aisys_grader.plain import to_plain

ALL_DTYPES = list(dtypes.BITS)

CUTLASS_SIMT = {"BM": 128, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "TM": 8, "TN": 8, "stages": 2}
CUTLASS_SM80 = {"BM": 128, "BN": 256, "BK": 64, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 3}
H100_LIMITS = {"smem_limit": gemm_tiling.H100_SHARED_MEMORY_PER_BLOCK,
               "regs_limit": gemm_tiling.MAX_REGISTERS_PER_THREAD}


def _matches(got, value) -> bool:
    try:
        assert_close(got, to_plain(value))
    except CheckFailure:
        return False
    return True


def _size(rng, high: int = 5) -> int:
    """1 to about 10**high, log-uniform, so odd and ragged sizes come up as often as round ones."""
    return int(10 ** rng.uniform(0, high))


def _tiling(rng) -> dict:
    """A valid tiling: each tile a multiple of the one inside it, sizes that need not be powers of two."""
    TM, TN = (int(rng.choice([1, 2, 4, 8, 16, 3])) for _ in range(2))
    WM, WN = TM * int(rng.choice([1, 2, 4, 8])), TN * int(rng.choice([1, 2, 4, 8]))
    BM, BN = WM * int(rng.choice([1, 2, 4])), WN * int(rng.choice([1, 2, 4]))
    return {"BM": BM, "BN": BN, "BK": int(rng.choice([8, 16, 32, 64, 24])), "WM": WM, "WN": WN, "TM": TM, "TN": TN,
            "stages": int(rng.integers(1, 6))}


# 1. Loads by a grid of tiles


def _tile_reads_hint(case, got, expected) -> str:
    M, N, K, tm, tn = (case[k] for k in ("M", "N", "K", "tile_m", "tile_n"))
    if expected > 2**53 and abs(got - expected) <= expected * 2**-52:
        return ("Off by a few elements in more than 2^53: a float64 holds integers that large only to within a few "
                "units. Count in integers: multiply ints, with ceil(N / tile_n) as math.ceil or -(-N // tile_n).")
    mistakes = [
        (M * K + K * N, "You counted A and B once. Each tile loads the rows of A and the columns of B it needs, so a "
                        "row of A is loaded once per column of tiles, ceil(N / tile_n) times, and a column of B once "
                        "per row of tiles."),
        (M * K * (N // tn) + K * N * (M // tm), "N // tile_n drops the last, partial column of tiles, but it exists "
                                                "and loads its rows of A too: use ceil."),
        (M * K * math.ceil(M / tm) + K * N * math.ceil(N / tn), "Rows and columns swapped: A (M x K) is re-read for "
                                                                "each column of tiles, ceil(N / tile_n)."),
        (math.ceil(M / tm) * tm * K * math.ceil(N / tn) + K * math.ceil(N / tn) * tn * math.ceil(M / tm),
         "A tile over the edge of C loads only the rows and columns that exist (masked loads): count M * K, "
         "not whole tiles."),
    ]
    hints = [message for value, message in mistakes if _matches(got, value)]  # on some cases, two mistakes agree
    return " Or: ".join(hints) or ("Count, for every tile of the grid, the real rows of A and columns of B it "
                                   "needs over the whole of K, and add them up.")


# Square 1 x 1 tiles from 2^12 tiles to 2^32, 4 times as many each step: the closed form answers at once, a loop
# over the tiles passes the budget at about 2^20 tiles (a third of that in traffic, which counts three levels).
GROWING = [2**e for e in range(6, 17)]
BUDGET = 0.1  # seconds a call may take at any size (a bridge call costs about 4 ms)
SLOW = ("A loop over every tile cannot finish at the sizes these cases grow to (2^32 tiles of 1 x 1): count in closed "
        "form, M K ceil(N / tile_n) + K N ceil(M / tile_m), since each row of A is loaded once per column of tiles "
        "and each column of B once per row of tiles.")


def _small_first(cases: list[tuple], growing: list[tuple], tiles) -> list[tuple]:
    """The cases of up to 2^12 tiles, then the growing ones, then the rest: a loop over the tiles meets the
    growing cases, and their budget, before any large case (up to 10^10 tiles) it could not finish."""
    small = [case for case in cases if tiles(case) <= 2**12]
    return small + growing + [case for case in cases if case not in small]


@check(points=2)
def tile_reads(student, rng, hidden):
    """tile_reads(M, N, K, tile_m, tile_n) counts the elements a grid of tiles loads: an integer, in closed form."""
    cases = [(256, 256, 64, 64, 64), (100, 70, 30, 32, 16)]
    if hidden:
        cases = [(1, 1, 1, 1, 1), (1, 1, 1, 128, 128), (128, 64, 9, 128, 64), (129, 65, 7, 128, 64),
                 (8192, 1, 8192, 128, 64), (3, 1000, 5, 2, 7),
                 (300007, 300007, 300007, 3, 1)]  # 2.7e16 elements: past 2^53, where floats round
        cases += [(_size(rng, 4), _size(rng, 4), _size(rng, 4), int(rng.integers(1, 300)), int(rng.integers(1, 300)))
                  for _ in range(10)]
    cases = _small_first(cases, [(size, size, 3, 1, 1) for size in GROWING],
                         lambda case: -(-case[0] // case[3]) * -(-case[1] // case[4]))
    compare_cases(student, "tile_reads", [dict(zip(("M", "N", "K", "tile_m", "tile_n"), case)) for case in cases],
                  gemm_tiling.tile_reads, returns="integer", hidden=hidden, hint=_tile_reads_hint, budget=BUDGET,
                  slow=SLOW)


# 2. Traffic at each level


def _traffic_reference(M, N, K, dtype, tiling, out_dtype=None):
    return gemm_tiling.traffic(M, N, K, dtype, Tiling(**tiling), out_dtype).as_dict()


LEVELS = {"global_reads": ("BM", "BN", "block tile BM x BN"), "shared_reads": ("WM", "WN", "warp tile WM x WN"),
          "register_reads": ("TM", "TN", "thread tile TM x TN")}


def _agrees(student, function: str, expected, **arguments) -> bool:
    """Whether the student's `function` (a helper the notebook has the student write) gives `expected` here;
    False when it raises."""
    try:
        return _matches(student.call(function, **arguments), expected)
    except CheckFailure:
        return False


def _level_arguments(case: dict, tile: tuple[str, str]) -> dict:
    tiling = case["tiling"]
    return {"M": case["M"], "N": case["N"], "K": case["K"], "tile_m": tiling[tile[0]], "tile_n": tiling[tile[1]]}


def _tile_reads_blamed(student, case: dict, key: str) -> str:
    """'' unless the student's tile_reads is wrong for this level's tiles: then that it is the cause."""
    arguments = _level_arguments(case, LEVELS[key][:2])
    if _agrees(student, "tile_reads", gemm_tiling.tile_reads(**arguments), **arguments):
        return ""
    return (f"Your tile_reads is wrong for the {LEVELS[key][2]} of this case, so {key}, if it uses it, is wrong with "
            "it: fix tile_reads first (its check says how).")


def _traffic_hint(student, case, got, expected) -> str:
    wrong = [key for key in expected if isinstance(got, dict) and key in got and not _matches(got[key], expected[key])]
    if not wrong:
        return "Return a dict with exactly the keys listed in the exercise."
    key = wrong[0]
    if key in LEVELS and (blamed := _tile_reads_blamed(student, case, key)):
        return blamed
    numeric = isinstance(got[key], (int, float)) and expected[key]
    ratio = got[key] / expected[key] if numeric else None
    size = dtypes.bytes_per_element(case["dtype"])
    if key == "flops":
        return "A multiply-add is two FLOPs: 2 * M * N * K." if ratio == 0.5 else "FLOPs are 2 * M * N * K."
    if key == "c_writes":
        if ratio == 2:
            return "C is stored once and never read (the accumulators start at zero in registers)."
        if case.get("out_dtype") and _matches(got[key], case["M"] * case["N"] * size):
            return "C is stored in out_dtype when one is given."
        return "C is stored once: M * N elements of out_dtype (of dtype when out_dtype is None)."
    if key in LEVELS:
        return f"{key} is tile_reads with the {LEVELS[key][2]}, times the bytes of one element of dtype."
    if key == "global_intensity":
        return "global_intensity is flops / (global_reads + c_writes): global memory sees C's stores too."
    return f"{key} is flops divided by the bytes that level reads."


def _traffic_cases(rng, hidden) -> list[dict]:
    if not hidden:
        return [{"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "tiling": CUTLASS_SM80},
                {"M": 1000, "N": 1, "K": 4096, "dtype": "fp32", "tiling": CUTLASS_SIMT}]
    cases = [{"M": 1, "N": 1, "K": 1, "dtype": "int4", "tiling": CUTLASS_SM80},
             {"M": 129, "N": 257, "K": 65, "dtype": "int8", "tiling": CUTLASS_SM80, "out_dtype": "int32"},
             {"M": 8192, "N": 8192, "K": 8192, "dtype": "fp8_e4m3", "tiling": CUTLASS_SM80, "out_dtype": "bf16"},
             {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp64", "tiling": CUTLASS_SIMT, "out_dtype": None}]
    for dtype in ALL_DTYPES:
        case = {"M": _size(rng), "N": _size(rng), "K": _size(rng), "dtype": dtype, "tiling": _tiling(rng)}
        if rng.random() < 0.5:
            case["out_dtype"] = (ALL_DTYPES + [None])[int(rng.integers(len(ALL_DTYPES) + 1))]
        cases.append(case)
    return cases


ONES = {"BM": 1, "BN": 1, "BK": 1, "WM": 1, "WN": 1, "TM": 1, "TN": 1, "stages": 1}  # 1 x 1 tiles at every level


def _traffic_slow(student, case: dict) -> str:
    """Why traffic is slow at this size: the student's tile_reads, when it alone is over the budget there."""
    arguments = _level_arguments(case, ("TM", "TN"))
    try:
        slow = student.timed_call("tile_reads", **arguments)[1] > BUDGET
    except CheckFailure:
        slow = False
    return ("your tile_reads is the slow part: on these 1 x 1 tiles it alone takes longer than that. " if slow
            else "each level's count is tile_reads of its tile. ") + SLOW


@check(points=2)
def traffic(student, rng, hidden):
    """traffic(M, N, K, dtype, tiling, out_dtype) gives FLOPs, bytes at each level, C's store and intensities."""
    growing = [{"M": size, "N": size, "K": 3, "dtype": "bf16", "tiling": ONES} for size in GROWING]
    compare_cases(student, "traffic", _small_first(_traffic_cases(rng, hidden), growing, _most_tiles),
                  _traffic_reference, returns="mapping", hidden=hidden, budget=BUDGET,
                  hint=lambda case, got, expected: _traffic_hint(student, case, got, expected),
                  slow=lambda case: _traffic_slow(student, case))


def _most_tiles(case: dict) -> int:
    """Tiles at the level with the smallest ones (threads'): what a loop over the tiles visits most."""
    return -(-case["M"] // case["tiling"]["TM"]) * -(-case["N"] // case["tiling"]["TN"])


# 3. A block's resources


def _resources_reference(tiling, dtype):
    return gemm_tiling.resources(Tiling(**tiling), dtype).as_dict()


def _resources_hint(case, got, expected) -> str:
    t, size = case["tiling"], dtypes.bytes_per_element(case["dtype"])
    wrong = [key for key in expected if isinstance(got, dict) and key in got and not _matches(got[key], expected[key])]
    if not wrong:
        return "Return a dict with exactly the keys threads, shared_memory and accumulator_registers."
    key = wrong[0]
    if key == "threads":
        return "One warp of 32 threads per warp tile: (BM // WM) * (BN // WN) * 32."
    if key == "shared_memory":
        slab = (t["BM"] * t["BK"] + t["BK"] * t["BN"]) * size
        if _matches(got[key], slab):
            return "Shared memory holds `stages` slabs at once, each of BM x BK of A and BK x BN of B."
        return "shared_memory = stages * (BM * BK + BK * BN) * bytes per element of dtype."
    return ("The block's BM x BN accumulators are fp32 (fp64 in an fp64 GEMM, two registers each), whatever the "
            "input format, shared evenly by the block's threads; a thread cannot hold part of a register: round up.")


def _resources_cases(rng, hidden) -> list[dict]:
    if not hidden:
        return [{"tiling": CUTLASS_SIMT, "dtype": "fp32"}, {"tiling": CUTLASS_SM80, "dtype": "bf16"}]
    tiny = {"BM": 8, "BN": 12, "BK": 8, "WM": 4, "WN": 4, "TM": 2, "TN": 2, "stages": 3}  # 16 accumulators per warp
    ragged = {"BM": 8, "BN": 10, "BK": 5, "WM": 8, "WN": 10, "TM": 1, "TN": 5, "stages": 1}  # 80 per warp: 2.5 each
    cases = [{"tiling": tiny, "dtype": "fp16"}, {"tiling": ragged, "dtype": "int4"},
             {"tiling": CUTLASS_SIMT, "dtype": "fp64"}, {"tiling": dict(CUTLASS_SM80, stages=5), "dtype": "int8"}]
    return cases + [{"tiling": _tiling(rng), "dtype": dtype} for dtype in ALL_DTYPES]


@check(points=1)
def resources(student, rng, hidden):
    """resources(tiling, dtype) gives a block's threads, shared memory, and accumulator registers per thread."""
    compare_cases(student, "resources", _resources_cases(rng, hidden), _resources_reference, returns="mapping",
                  hidden=hidden, hint=_resources_hint)


# 4. The best tile that fits


def _best_reference(M, N, K, dtype, candidates, smem_limit, regs_limit):
    tilings = [Tiling(**c) for c in candidates]
    if not any(fits(t, dtype, smem_limit, regs_limit) for t in tilings):
        return None
    return gemm_tiling.best_tiling(M, N, K, dtype, tilings, smem_limit, regs_limit).as_dict()


def _helpers_blamed(student, case: dict) -> str:
    """'' unless the student's resources or traffic is wrong for a candidate of this case: then that it is the cause."""
    M, N, K, dtype = (case[k] for k in ("M", "N", "K", "dtype"))
    for i, candidate in enumerate(case["candidates"]):
        for function, expected, arguments in (
                ("resources", _resources_reference(candidate, dtype), {"tiling": candidate, "dtype": dtype}),
                ("traffic", _traffic_reference(M, N, K, dtype, candidate), {"M": M, "N": N, "K": K, "dtype": dtype,
                                                                            "tiling": candidate})):
            if not _agrees(student, function, expected, **arguments):
                return (f"Your {function} is wrong for candidate {i} of this case, and the choice rests on it: fix "
                        f"{function} first (its check says how).")
    return ""


def _best_hint(student, case, got, expected) -> str:
    if blamed := _helpers_blamed(student, case):
        return blamed
    if expected is None:
        return "No candidate fits both limits: return None."
    if got is None:
        return "At least one candidate fits both limits."
    candidates = case["candidates"]
    if got not in candidates:
        return "Return one of the candidates, unchanged."
    dtype, shape = case["dtype"], (case["M"], case["N"], case["K"], case["dtype"])
    chosen, best = Tiling(**candidates[candidates.index(got)]), Tiling(**expected)
    used, needed = gemm_tiling.resources(chosen, dtype), gemm_tiling.resources(best, dtype)
    if not fits(chosen, dtype, case["smem_limit"], case["regs_limit"]):
        if redacting():  # the limits and the candidates are the hidden case's
            over = [what for what, used_, limit in (
                ("shared memory", used.shared_memory, case["smem_limit"]),
                ("accumulator registers per thread", used.accumulator_registers, case["regs_limit"])) if used_ > limit]
            return (f"Your choice does not fit: it needs more {' and more '.join(over) or 'resources'} than this case "
                    "allows. Keep only the candidates within both limits, then choose.")
        return (f"Your choice does not fit: it needs {used.shared_memory:g} bytes of shared memory (limit "
                f"{case['smem_limit']}) and {used.accumulator_registers} accumulator registers per thread (limit "
                f"{case['regs_limit']}). Keep only the candidates within both limits, then choose.")
    intensity = {t: gemm_tiling.traffic(*shape, t).cost("global").intensity for t in (chosen, best)}
    if intensity[chosen] < intensity[best]:
        return "A candidate that fits has a higher global intensity (fewer bytes loaded from global memory)."
    if used.shared_memory > needed.shared_memory:
        return "Equal global intensity: the tie goes to the candidate with less shared memory."
    return "Equal intensity and shared memory: the tie goes to the first of them in `candidates`."


POOL = [  # tilings of real kernels (CUTLASS defaults, Triton's autotuning lists) and smaller ones
    CUTLASS_SIMT, CUTLASS_SM80,
    {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 4},
    {"BM": 256, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 3},
    {"BM": 128, "BN": 64, "BK": 32, "WM": 64, "WN": 32, "TM": 16, "TN": 8, "stages": 4},
    {"BM": 64, "BN": 128, "BK": 32, "WM": 32, "WN": 64, "TM": 16, "TN": 8, "stages": 4},
    {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "TM": 16, "TN": 8, "stages": 5},
    {"BM": 32, "BN": 64, "BK": 32, "WM": 16, "WN": 32, "TM": 16, "TN": 8, "stages": 5},
    {"BM": 16, "BN": 256, "BK": 64, "WM": 16, "WN": 64, "TM": 16, "TN": 8, "stages": 3},
    {"BM": 128, "BN": 256, "BK": 64, "WM": 64, "WN": 64, "TM": 16, "TN": 8, "stages": 4},
]
LIMITS = [H100_LIMITS, {"smem_limit": 163 * 1024, "regs_limit": 255},  # H100, A100 (per block)
          {"smem_limit": 48 * 1024, "regs_limit": 128}, {"smem_limit": 100_000, "regs_limit": 64}]


def _fixed_best_cases() -> list[dict]:
    """One case on the boundary of each rule, whatever the seed."""
    big, exact = dict(CUTLASS_SM80, BN=128, BK=32, stages=2), {**CUTLASS_SM80, "BM": 96, "BN": 96, "WM": 48, "WN": 48,
                                                               "BK": 32, "stages": 2}
    deep = dict(CUTLASS_SM80, stages=4)  # 192 KiB: fits 227 KiB, and 163 KiB only without its stages
    narrow = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "TM": 16, "TN": 8, "stages": 2}
    return [
        # the highest intensity needs more shared memory than a smaller tile that also fits
        {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "candidates": [narrow, deep], **H100_LIMITS},
        # the largest tile fits only if its stages are forgotten
        {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "candidates": [narrow, deep],
         "smem_limit": 163 * 1024, "regs_limit": 255},
        # 128 accumulators per thread exceed 64, but not if counted as two fp16 per register
        {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16", "candidates": [narrow, CUTLASS_SM80],
         "smem_limit": 1e9, "regs_limit": 64},
        # on a 96 x 96 C both tiles load each panel once: a tie, which less shared memory breaks
        {"M": 96, "N": 96, "K": 256, "dtype": "bf16", "candidates": [big, exact], "smem_limit": 1e9, "regs_limit": 255},
        # twins: the first in the list
        {"M": 1000, "N": 1000, "K": 64, "dtype": "fp32", "candidates": [dict(narrow, WM=64, TM=8), narrow],
         "smem_limit": 1e9, "regs_limit": 255},
        # nothing fits
        {"M": 64, "N": 64, "K": 64, "dtype": "fp32", "candidates": [CUTLASS_SM80], "smem_limit": 4096,
         "regs_limit": 255},
        # exactly at both limits
        {"M": 512, "N": 512, "K": 512, "dtype": "bf16", "candidates": [narrow, CUTLASS_SM80],
         "smem_limit": 147456, "regs_limit": 128},
    ]


def _best_cases(rng, hidden) -> list[dict]:
    if not hidden:
        return [{"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "candidates": [CUTLASS_SIMT, CUTLASS_SM80, POOL[2]],
                 **H100_LIMITS},
                {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "candidates": [CUTLASS_SM80, POOL[2], POOL[6]],
                 "smem_limit": 48 * 1024, "regs_limit": 255}]
    cases = _fixed_best_cases()
    for _ in range(10):
        chosen = rng.choice(len(POOL), size=int(rng.integers(2, 7)), replace=False)
        candidates = [dict(POOL[i], stages=int(rng.integers(1, 6))) for i in chosen]
        cases.append({"M": _size(rng, 4), "N": _size(rng, 4), "K": _size(rng, 4), "dtype": str(rng.choice(ALL_DTYPES)),
                      "candidates": candidates, **LIMITS[int(rng.integers(len(LIMITS)))]})
    return cases


@check(points=2)
def best_tiling(student, rng, hidden):
    """best_tiling(...) picks the fitting candidate of highest global intensity, with the ties broken as stated."""
    compare_cases(student, "best_tiling", _best_cases(rng, hidden), _best_reference, returns="any", hidden=hidden,
                  hint=lambda case, got, expected: _best_hint(student, case, got, expected))

