"""Checks: a tiled GEMM with tl.dot, its grouped program order and its autotuning list.

The truth is the float64 product of the inputs as the student receives them
(already rounded to float16 or bfloat16), rounded to that dtype. A kernel that
accumulates in float32 and rounds once, at the store, is within one unit in
the last place of the dtype (the interpreter rounds float32 to bfloat16 toward
zero, which costs that unit) plus the float32 summation's worst case, K steps
of one float32 unit each on the sum of |a||b| (Tensor Cores truncate where
IEEE rounds to nearest: Fasi et al., "Numerical behavior of NVIDIA tensor
cores", PeerJ CS 2021). A float16 accumulator rounds at every step of K to
float16's 11 bits. Measured in the interpreter over six seeds: on uniform
[0, 1) data with K = 1024 to 1700 and BLOCK_K = 16, 12 to 32% of the results
are outside that tolerance (the worst by 2.6 to 4.3x); on standard normal data
with K = 100, 6 to 14% (the worst by 4 to 9x); the float32 solution's worst
is 0.63 of the tolerance (bfloat16's truncation). A float16 sum past 65504 is
inf: `matmul_fp32_accumulator` has long K on positive data and such sums.

Every matrix lies at the start of a buffer whose tail holds the dtype's
largest number (aisys.tensors.to_device), so on a GPU a missing mask on K
shows; in Triton's interpreter every load and store past a tensor is an error
(aisys.triton_interpreter), a missing mask on M or N too, though those rows and
columns only feed elements that the masked store drops. The product must come
back in the data's dtype (bf16 as float32 holding bf16 values).

`matmul_tiles` runs matmul in the grader's Triton interpreter (the clean room)
and counts its launch: one program per tile, every multiply-add in tl.dot (the
Tensor Cores' instruction), and each program reading its panel of A and of B
once.
"""

import numpy as np
import torch

from aisys.gemm_tiling import H100_SHARED_MEMORY_PER_BLOCK, block_order
from aisys.triton_kernels import matmul as reference  # noqa: F401  the answer key: kept out of the grading kernel
from aisys.tensors import TORCH_DTYPES

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import FORMATS, CheckFailure, assert_close, describe, shown, unredacted
from aisys_grader.low_precision import as_sent


DTYPES = ("fp16", "bf16")
FRACTION_BITS = {"fp16": 10, "bf16": 7}  # one unit in the last place is at most 2**-bits of the value
FP32_STEP = 2.0 ** -23  # one float32 unit in the last place, relative: the worst error of one truncated addition
SMALLEST_STEP = 2.0 ** -24  # float16's smallest subnormal: below it, relative errors mean nothing

TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
INPUT_BYTES = 2  # fp16 and bf16
MAX_CONFIGS = 12  # the autotuner compiles and times every config for every new shape
ACCUMULATOR_REGISTERS = 128  # of a thread's 255: the rest hold operands, pointers and the loop


def _config(block_m, block_n, block_k, group_m):
    """The config dict `matmul` takes; warps and stages do not change the interpreter's result."""
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m,
            "num_warps": 4, "num_stages": 2}


# ---------------------------------------------------------------- the product


def _inputs(rng, M, N, K, dtype, kind="normal"):
    """(a, b) as the student receives them: standard normal, uniform [0, 1), or built so a float16 sum overflows."""
    if kind == "normal":
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    elif kind == "uniform":  # all positive: every partial sum grows, so every rounding of the sum counts
        a, b = rng.random((M, K)), rng.random((K, N))
    else:
        # "overflow", K even, 256 to 510: every product in the first half of K is at least 24 x 24 = 576, so with
        # BLOCK_K <= 32 the sum passes 65504 at a step of K (128 x 576 = 73728); the second half cancels it down
        # to |C| <= K/2 x (32 - 24) x 32 = 128 K <= 65280
        a = rng.uniform(24, 32, (M, K))
        half = rng.uniform(24, 32, (K // 2, N))
        b = np.concatenate([half, -half])
    return as_sent(a, dtype), as_sent(b, dtype)


def _expected(a, b, dtype):
    """a @ b in float64, rounded to `dtype` (as float32 when bf16)."""
    exact = torch.from_numpy(a.astype(np.float64)) @ torch.from_numpy(b.astype(np.float64))
    return exact.to(TORCH_DTYPES[dtype]).float().numpy()


def _magnitudes(a, b):
    """|a| @ |b|: the size of the terms each element of the product sums, whatever their signs."""
    return np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))


def _tolerance(a, b, dtype):
    """(rtol, atol): one unit in the last place of `dtype`, plus K float32 steps on the largest sum of |a||b|."""
    return 2.0 ** -FRACTION_BITS[dtype], a.shape[1] * FP32_STEP * float(_magnitudes(a, b).max()) + SMALLEST_STEP


def _describe(case):
    a, b, config = case["a"], case["b"], case["config"]
    tiles = "x".join(str(config[key]) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return (f"matmul(a {a.shape[0]}x{a.shape[1]}, b {b.shape[0]}x{b.shape[1]}, '{case['dtype']}', "
            f"config tiles {tiles}, GROUP_M {shown(config['GROUP_M'])})")


def _hint(case, got, expected):
    """What the kind of difference between `got` and the true product `expected` usually means."""
    a, b, dtype, config = case["a"], case["b"], case["dtype"], case["config"]
    rtol, atol = _tolerance(a, b, dtype)
    if got.shape != expected.shape:
        return "Return the (M, N) product: C has a's rows and b's columns."
    if got.dtype != np.dtype(FORMATS[dtype]):
        return "Allocate C in the inputs' dtype (dtype=a.dtype): the store rounds the float32 accumulator to it."
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    if (~np.isfinite(got)).any():
        return ("inf or NaN where the product is finite: a float16 accumulator overflows past 65504 (accumulate in "
                "tl.float32), or a load without the mask offs_k < K - k0 read past the end of the matrix, where these "
                "checks put the dtype's largest number.")
    bad = ~np.isclose(got, expected, rtol=rtol, atol=atol)
    tile_m, tile_n = config["BLOCK_M"], config["BLOCK_N"]
    tiles = [bad[i:i + tile_m, j:j + tile_n] for i in range(0, bad.shape[0], tile_m)
             for j in range(0, bad.shape[1], tile_n)]
    if all(t.all() or not t.any() for t in tiles) and any(t.all() for t in tiles) and not all(t.all() for t in tiles):
        return ("Whole tiles are wrong and the others right: no program computed those tiles. Check tile_of: in the "
                "last group of rows, which may be shorter, use min(tiles_m - first_m, GROUP_M) rows.")
    relative = np.abs(got - expected) / np.maximum(_magnitudes(a, b), SMALLEST_STEP)
    if relative.max() <= 8 * 2.0 ** -FRACTION_BITS[dtype]:
        return (f"The errors are a few units in the last place of {dtype}, as rounding at every step of K gives: "
                "accumulate in float32 (tl.zeros(..., dtype=tl.float32)) and convert once, at the store.")
    return ("Check the loop over K: both loads masked with offs_k < K - k0 (other=0.0), and the steps "
            "a_ptrs += BLOCK_K * stride_ak (columns of A) and b_ptrs += BLOCK_K * stride_bk (rows of B).")


def _products(student, cases, hidden):
    """The student's matmul on each case against the true product, within the tolerance for that case."""
    compare_cases(student, "matmul", cases, lambda a, b, dtype, config: _expected(a, b, dtype), returns="array",
                  hidden=hidden, tolerance=lambda case: _tolerance(case["a"], case["b"], case["dtype"]),
                  dtype=lambda case: case["dtype"], hint=_hint, call=_describe)


def _case(rng, M, N, K, dtype, config, kind="normal"):
    a, b = _inputs(rng, M, N, K, dtype, kind)
    return {"a": a, "b": b, "dtype": dtype, "config": config}


def _edge(rng, block):
    """A size at a tile's edge: one below, at, or one above a multiple of `block`."""
    return int(rng.integers(1, 3)) * block + int(rng.integers(-1, 2))


@check(points=3)
def matmul(student, rng, hidden):
    """matmul(a, b, dtype, config) matches the product: 1x1x1, sizes at tile edges, ragged shapes, fp16 and bf16."""
    if not hidden:
        plan = [((1, 1, 1), "fp16", _config(16, 16, 16, 1)),
                ((33, 31, 70), "fp16", _config(32, 32, 32, 2)),
                ((50, 70, 100), "bf16", _config(16, 16, 16, 3))]  # 4 x 5 tiles: the last group of 3 rows has 1
    else:
        plan = []
        for dtype in DTYPES:
            plan.append(((1, 1, 1), dtype, _config(16, 16, 16, int(rng.integers(1, 5)))))
            plan.append(((70, 40, 50), dtype, _config(16, 16, 16, 3)))  # 5 rows of tiles in groups of 3
            plan.append(((int(rng.integers(2, 40)), int(rng.integers(2, 40)), 1), dtype, _config(16, 16, 16, 2)))
            plan.append(((1, int(rng.integers(20, 100)), int(rng.integers(20, 100))), dtype, _config(16, 32, 16, 2)))
            plan.append(((int(rng.integers(20, 100)), 1, int(rng.integers(20, 100))), dtype, _config(32, 16, 32, 2)))
            for _ in range(2):
                block_m, block_n, block_k = (int(rng.choice([16, 32])) for _ in range(3))
                shape = (_edge(rng, block_m), _edge(rng, block_n), _edge(rng, block_k))
                plan.append((shape, dtype, _config(block_m, block_n, block_k, int(rng.integers(1, 5)))))
            shape = tuple(int(v) for v in rng.integers(2, 100, 3))
            plan.append((shape, dtype, _config(16, 16, 16, int(rng.integers(1, 5)))))
    _products(student, [_case(rng, *shape, dtype, config) for shape, dtype, config in plan], hidden)


@check(points=2)
def matmul_fp32_accumulator(student, rng, hidden):
    """A float32 accumulator: long K on positive data (float16's rounding adds up) and float16 sums past 65504."""
    if not hidden:
        cases = [_case(rng, 32, 32, 1024, "fp16", _config(32, 32, 16, 1), "uniform"),
                 _case(rng, 16, 16, 256, "fp16", _config(16, 16, 32, 1), "overflow")]
    else:
        ragged_k = [16 * int(rng.integers(94, 128)) + int(rng.integers(1, 16)) for _ in DTYPES]  # 1505 to 2047
        cases = [_case(rng, int(rng.integers(17, 33)), int(rng.integers(17, 33)), K, dtype, _config(32, 32, 16, 1),
                       "uniform") for K, dtype in zip(ragged_k, DTYPES)]
        cases.append(_case(rng, int(rng.integers(10, 33)), int(rng.integers(10, 33)), 2 * int(rng.integers(128, 256)),
                           "fp16", _config(32, 32, 32, 1), "overflow"))
    _products(student, cases, hidden)


# ---------------------------------------------------------------- the order of programs


def _order_hint(got, tiles_m, tiles_n, group_m):
    """What is wrong with an order that differs from the grouped one."""
    if got.shape != (tiles_m * tiles_n, 2):
        return "tile_of must give one (pid_m, pid_n) per program."
    tiles = [tuple(int(v) for v in row) for row in got]
    outside = [t for t in tiles if not (0 <= t[0] < tiles_m and 0 <= t[1] < tiles_n)]
    if outside or len(set(tiles)) != len(tiles):
        what = f"tile {outside[0]} lies outside the grid" if outside else "two programs compute the same tile"
        return (f"{what}, so some tile is never computed. In the last group, which may be shorter, there are "
                "min(tiles_m - first_m, GROUP_M) rows: take pid_m and pid_n modulo and divided by that, not GROUP_M.")
    if tiles == block_order(tiles_m, tiles_n, 1) and group_m > 1:
        return "This is row-major order; sweep GROUP_M rows of tiles column by column."
    return ("Every tile once, but in another order: program pid of a group takes row first_m + (pid % per_group) % "
            "rows and column (pid % per_group) // rows, with per_group = GROUP_M * tiles_n.")


@check(points=2)
def program_order(student, rng, hidden):
    """tile_of gives Triton's grouped order: GROUP_M rows of tiles column by column, the last group shorter."""
    grids = [(5, 4, 2), (3, 7, 4), (6, 3, 1)]
    if hidden:
        grids = [(1, 1, 1), (1, 1, 8), (7, 5, 3), (8, 8, 8), (2, 9, 8), (9, 2, 2)]
        grids += [tuple(int(v) for v in (rng.integers(1, 13), rng.integers(1, 13), rng.integers(1, 10)))
                  for _ in range(4)]
    for i, (tiles_m, tiles_n, group_m) in enumerate(grids, 1):
        label = (f"{'hidden case' if hidden else 'case'} {i} of {len(grids)}: program_order(tiles_m="
                 f"{describe(tiles_m)}, tiles_n={describe(tiles_n)}, group_m={describe(group_m)})")
        try:
            got = student.call("program_order", tiles_m, tiles_n, group_m, returns="array")
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {failure}") from None
        try:
            assert_close(got, np.array(block_order(tiles_m, tiles_n, group_m), dtype=np.int32), rtol=0, atol=0,
                         where="(pid_m, pid_n) per program")
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {failure}. {_order_hint(got, tiles_m, tiles_n, group_m)}") from None


# ---------------------------------------------------------------- autotuning


def _power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def _config_problems(config) -> list[str]:
    """Why one config (a dict from config_dicts) would not work on an H100; empty if it would."""
    if not isinstance(config, dict):
        return [f"expected a dict, got {type(config).__name__}"]
    keys = set(config) - {"num_warps", "num_stages"}
    if keys != set(TILE_KEYS):
        got = unredacted(", ".join(sorted(keys)) or "none", f"{len(keys)} others")  # the student's own text
        return [f"its constants must be exactly {', '.join(TILE_KEYS)}; got {got}"]
    problems = [f"{key} = {shown(config[key], '!r')}: tiles must be powers of two of at least 16 (tl.dot and the "
                "Tensor Cores' instructions work on 16-wide pieces)" for key in TILE_KEYS[:3]
                if not (_power_of_two(config[key]) and config[key] >= 16)]
    group_m, warps, stages = config["GROUP_M"], config.get("num_warps"), config.get("num_stages")
    if not (isinstance(group_m, int) and group_m >= 1):
        problems.append(f"GROUP_M = {shown(group_m, '!r')}: a positive integer (1 is row-major order)")
    if warps not in (4, 8):
        problems.append(f"num_warps = {shown(warps, '!r')}: 4 or 8 (Hopper's wgmma is issued by a warpgroup of 4 "
                        "warps)")
    if not (isinstance(stages, int) and stages >= 2):
        problems.append(f"num_stages = {shown(stages, '!r')}: at least 2, so one tile loads while the other is "
                        "computed on")
    if problems:
        return problems
    block_m, block_n, block_k = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    shared = stages * (block_m + block_n) * block_k * INPUT_BYTES
    if shared > H100_SHARED_MEMORY_PER_BLOCK:
        problems.append("shared memory num_stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes = "
                        + unredacted(f"{stages} x {block_m + block_n} x {block_k} x 2 = {shared / 1024:g} KiB, ")
                        + f"more than the {H100_SHARED_MEMORY_PER_BLOCK // 1024} KiB an H100 gives one thread block")
    registers = block_m * block_n // (32 * warps)
    if registers > ACCUMULATOR_REGISTERS:
        problems.append(f"BLOCK_M x BLOCK_N / (32 x num_warps){unredacted(f' = {registers}')} float32 accumulators "
                        "per thread, more "
                        f"than {ACCUMULATOR_REGISTERS} of its 255 registers, which leaves too few for the operands "
                        "and addresses: expect spills to local memory (use 8 warps, or a smaller tile)")
    return problems


def _student_configs(student) -> list:
    configs = student.call("config_dicts", returns="list")
    if not 2 <= len(configs) <= MAX_CONFIGS:
        raise CheckFailure(f"gpu_configs() gives {len(configs)} configs; autotuning needs at least 2 to choose from, "
                           f"and times every one on every new shape: at most {MAX_CONFIGS}")
    return configs


@check(points=1)
def gpu_configs(student, rng, hidden):
    """gpu_configs(): 2 to 12 distinct configs, tiles powers of two >= 16, each within an H100's shared memory,
    4 or 8 warps, at least 2 stages, at most 128 accumulator registers per thread."""
    configs = _student_configs(student)
    for i, config in enumerate(configs, 1):
        problems = _config_problems(config)
        if problems:
            shown_config = unredacted(f" ({config})")  # the student's own values
            raise CheckFailure(f"config {i} of {len(configs)}{shown_config}: " + "; ".join(problems) + ".")
    keys = [tuple(sorted(config.items())) for config in configs]
    if len(set(keys)) != len(keys):
        raise CheckFailure("two configs are the same: the autotuner would time one of them twice.")


@check(points=2)
def matmul_every_config(student, rng, hidden):
    """Your kernel is right under each of your configs, on a matrix one row and one column past a tile."""
    configs = _student_configs(student)
    cases = []
    for i, config in enumerate(configs):
        if not (isinstance(config, dict) and all(_power_of_two(config.get(key)) for key in TILE_KEYS[:3])):
            raise CheckFailure(f"config {i + 1} of {len(configs)}{unredacted(f' ({config})')} has no power-of-two "
                               "BLOCK_M, BLOCK_N and BLOCK_K to run; see the gpu_configs check.")
        block_m, block_n, block_k = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        if not hidden:
            shape, dtype = (block_m + 1, block_n - 1, 2 * block_k + 1), DTYPES[i % 2]
        else:
            shape = (block_m + int(rng.choice([-1, 1])), block_n + int(rng.choice([-1, 1])),
                     int(rng.choice([block_k - 1, block_k + 1, 2 * block_k + 1])))
            dtype = str(rng.choice(DTYPES))
        cases.append(_case(rng, *shape, dtype, config))
    _products(student, cases, hidden)


TILES_SHAPE, TILES_CONFIG = (40, 40, 64), _config(16, 16, 16, 2)  # 3 x 3 tiles, the last row and column ragged


@check(points=2)
def matmul_tiles(student, rng, hidden):
    """matmul runs one program per tile of C, does every multiply-add in tl.dot and reads each program's panels of
    A and B once (counted in the grader's Triton interpreter)."""
    (M, N, K), config = TILES_SHAPE, TILES_CONFIG
    case = _case(rng, M, N, K, "fp16", config)
    got, launches = student.profiled_call("matmul", returns="array", dialect="triton", **case)
    # the product, loosely: the run counted must compute it; its precision is the other checks' business
    rtol, atol = (16 * t for t in _tolerance(case["a"], case["b"], "fp16"))
    assert_close(got, _expected(case["a"], case["b"], "fp16"), rtol=rtol, atol=atol, where=_describe(case))
    if len(launches) != 1:
        raise CheckFailure(f"{_describe(case)} runs {len(launches)} Triton kernels: compute C in one launch.")
    (launch,) = launches
    tiles_m, tiles_n = -(-M // config["BLOCK_M"]), -(-N // config["BLOCK_N"])
    if launch["programs"] != tiles_m * tiles_n:
        raise CheckFailure(f"{_describe(case)} runs {launch['programs']} programs for {tiles_m} x {tiles_n} tiles of "
                           "C: launch one program per BLOCK_M x BLOCK_N tile, which loops over K.")
    if launch["dot_macs"] < M * N * K:
        raise CheckFailure(f"{_describe(case)} does {launch['dot_macs']} of its {M * N * K} multiply-adds in tl.dot: "
                           "products summed with tl.sum run on the ordinary arithmetic units; tl.dot of a tile of A "
                           "by a tile of B is what Triton turns into Tensor Core instructions.")
    panels = tiles_n * M * K + tiles_m * K * N  # each program: its BLOCK_M rows of A and BLOCK_N columns of B, once
    if launch["loaded"] > panels:
        raise CheckFailure(f"{_describe(case)} loads {launch['loaded']} elements where one pass of each program over "
                           f"its panels of A and B loads {panels}: load each tile of A and of B once per step of K.")


# Speed, on a GPU ------------------------------------------------------------------------------------------------------
# (imported here, beside the checks they serve; aisys_grader/speed.py says how a kernel is timed, and why it is trusted)
from aisys_grader import speed  # noqa: E402
from aisys_grader.checks import require_gpu  # noqa: E402

SPEED_SIZE = 8192
SPEED_CONFIGS = 8  # of config_dicts(), the first ones are tried


def _your_configs(student) -> list[dict]:
    """matmul's keyword arguments to try: each of your configs (timed briefly; the fastest is measured)."""
    configs = student.call("config_dicts", returns="list")
    if not configs or not all(isinstance(c, dict) for c in configs):
        raise CheckFailure("config_dicts() must return a non-empty list of dicts (the configs matmul takes)")
    return [{"config": c} for c in configs[:SPEED_CONFIGS]]


SPEED = speed.Workload(
    "matmul", (speed.Input((SPEED_SIZE, SPEED_SIZE), "bf16"), speed.Input((SPEED_SIZE, SPEED_SIZE), "bf16")),
    args=("bf16",), reference=lambda a, b, dtype, config=None: torch.matmul(a, b), rtol=8e-3,
    limit=speed.op_limit("cuBLAS (torch.matmul)", lambda a, b, dtype, config=None: torch.matmul(a, b)),
    work=2 * SPEED_SIZE**3, unit="flops", label=f"two {SPEED_SIZE} x {SPEED_SIZE} bf16 matrices", reps=160,
    floor=0.4, choices=_your_configs,
    hint="Large tiles (128 x 128 to 128 x 256, BLOCK_K 64) with 3 or 4 pipeline stages and GROUP_M ordering keep "
         "the Tensor Cores fed; small tiles load every element of A and B many more times.")


@check(points=1)
def matmul_speed(student, rng, hidden):
    """On a GPU: matmul of two 8192 x 8192 bf16 matrices, with the fastest of your configs, runs at 40% or more of
    cuBLAS's speed.

    Timed by the grader on fresh inputs each repetition, the L2 cache cleared in between, against torch.matmul
    (cuBLAS) in the same run (aisys_grader/speed.py). Without a GPU it is skipped and the notebook graded without
    it."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.4)


@check(points=1)
def matmul_near_cublas_speed(student, rng, hidden):
    """On a GPU: matmul of two 8192 x 8192 bf16 matrices, with the fastest of your configs, runs at 60% or more of
    cuBLAS's speed."""
    require_gpu(optional=True)
    speed.require(student, SPEED, at_least=0.6)
