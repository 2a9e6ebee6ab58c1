"""Checks: a cycle-accurate systolic array, driven from the grader's side.

The array model, aisys.systolic.array, runs here in the grader's process. For the step checks it
calls the student's `os_step` or `ws_step` across the bridge once per cycle, with plain arrays,
and accepts the registers that come back only if they obey the dataflow's locality rule, so a
step that computes A @ B directly, or moves a value two PEs in one cycle, fails whatever the
student's kernel claims; the feed is the reference's, so that a wrong skew costs only the skew
check. The matrices hold distinct nonzero values, so a value in the wrong place can be named.
The trace of each run (product, cycle count, busy PEs per cycle) is compared with the
reference's on the same input: integers exactly, floats within their dtype's tolerance.

The skew check reads the student's feed for every cycle of a stream's life and a few beyond;
when it is wrong, a grader-side run with that feed says what it does to the product. The
schedule check runs the student's tiles here, with the reference's steps, and measures the
product and the cycles; the cycles check compares the count with the reference's closed form, and times it on
products that grow to 2^32 tiles: a loop over every tile is stopped at the first size it takes over 0.1 s for.

Hidden cases cover a 1 x 1 array, K = 1, tiles smaller than the array (idle PEs), rectangular
arrays and products (M, N and K all different), products many times the array (ragged last
tiles along each dimension), int8, int32, float32 and float64 data, and both dataflows. Each
bridge call costs about 4 ms in the sandboxed kernel: the step cases stay small (arrays up to
6 x 6, streams up to 12), which is enough to expose every mistake.
"""

import contextlib
from unittest import mock

import numpy as np

import aisys.systolic.array as array_model
import aisys.systolic.dataflows as reference  # the answer key: kept out of the grading kernel
from aisys.systolic.array import NAMES, STEP_NAMES, run, run_schedule, tile_ranges

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, redacting, unredacted


DTYPES = ("int8", "int32", "float32", "float64")


def _matrices(rng, m: int, k: int, n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B (k x n) whose values are all distinct and nonzero, so that each can be traced."""
    count = m * k + k * n
    if dtype.startswith("int"):
        top = 127 if dtype == "int8" else 1000
        if count > top:
            raise ValueError(f"{count} distinct nonzero {dtype} values do not fit below {top}")
        values = rng.choice(np.arange(1, top + 1), size=count, replace=False) * rng.choice([-1, 1], size=count)
    else:
        values = rng.uniform(0.5, 2.0, size=count) * rng.choice([-1.0, 1.0], size=count)
    values = values.astype(dtype)
    return values[:m * k].reshape(m, k), values[m * k:].reshape(k, n)


@contextlib.contextmanager
def _registers_unquoted():
    """Inside `redacted()`, the array model's messages name each register's element and PE (A[1, 2] at PE(0, 1))
    but not the value it holds, which is a hidden input or what the student's step made of one: the model quotes
    values only through `_number` and `_short`, which say "a value" and give a kind here. (An option of the
    model's own would be cleaner; the model is not the checks'.)"""
    if not redacting():
        yield
        return
    with mock.patch.object(array_model, "_number", lambda value: "a value"), \
            mock.patch.object(array_model, "_short", describe):
        yield


def _call(function: str, case: tuple) -> str:
    """'cycles(M=..., N=..., K=..., rows=..., cols=..., dataflow=...)': the sizes are this function's whole input, so
    inside `redacted()` they read as integers, as compare_cases shows them."""
    sizes = ", ".join(f"{k}={describe(v)}" for k, v in zip(("M", "N", "K", "rows", "cols"), case))
    return f"{function}({sizes}, dataflow={case[5]!r})"


# ---------------------------------------------------------------------------------------------- skew

SKEW_VISIBLE = [(3, 4), (2, 5)]  # (n streams, length)
SKEW_HIDDEN = [(1, 1), (1, 5), (4, 1), (3, 4), (6, 12), (5, 2)]


def _skew_table(student, n: int, length: int) -> list[np.ndarray]:
    """The student's skew for cycles 0 .. n + length: the whole life of every stream, and two cycles after."""
    table = []
    for t in range(n + length + 1):
        got = student.call("skew", t, n, length)
        try:
            index = np.asarray(got)
        except ValueError:  # a ragged list
            index = np.asarray(None)
        if index.shape != (n,) or index.dtype.kind not in "iuf" or not np.array_equal(index, np.round(index)):
            raise CheckFailure(f"skew({t}, {describe(n)}, {describe(length)}) returned {describe(got)}; it must "
                               f"return {unredacted(str(n), 'n')} integers, one per stream (an array or a list)")
        table.append(index.astype(np.int64))
    return table


def _skew_hint(table: list[np.ndarray], n: int) -> str:
    """What the student's feed does wrong, from the cycle in which each stream starts."""
    starts = [next((t for t, row in enumerate(table) if row[s] >= 0), None) for s in range(n)]
    if n > 1 and len(set(starts)) == 1:
        return ("Every stream starts in the same cycle, so the operands of a multiply-add never meet: A[1, 0] "
                "enters PE(1, 0) in cycle 0, but B[0, 0] reaches PE(1, 0) only in cycle 1, one hop down from "
                "PE(0, 0). Stream i must start i cycles after stream 0.")
    if n > 1 and starts == list(range(n - 1, -1, -1)):
        return ("The skew runs the wrong way: the last stream starts first. Values enter at row 0 and column 0 "
                "and move away from them, so stream i, i hops from the corner, must start i cycles late.")
    return ("Stream i sends element t - i in cycle t while 0 <= t - i < length, and -1 before its first element "
            "and after its last.")


def _skew_consequence(table: list[np.ndarray], n: int, length: int, rng) -> str:
    """What this feed does to an output-stationary n x n array (reference steps), computed here."""
    A, B = _matrices(rng, n, length, n, "int32")

    def feed(t, streams, size):
        return table[t] if t < len(table) else np.full(streams, -1)

    try:
        trace = run(A, B, n, n, "os", step=reference.os_step, skew=feed)
    except ValueError as error:
        return unredacted(f" Fed to an output-stationary {n} x {n} array, it fails: {error}.",
                          " Fed to an output-stationary n x n array, it fails: the model refuses it.")
    wrong = int((trace.output != A.astype(np.int64) @ B).sum())
    where = unredacted(f" Fed to an output-stationary {n} x {n} array (A {n} x {length} @ B {length} x {n})",
                       " Fed to an output-stationary n x n array (A n x length @ B length x n)")
    if trace.mismatches:
        return (f"{where}: in {trace.mismatches[0]}, and {wrong} of the {unredacted(str(n * n), 'n x n')} outputs "
                "come out wrong: the two operands of a multiply-add must share their k.")
    if wrong:
        return f"{where}, {wrong} of the {unredacted(str(n * n), 'n x n')} outputs come out wrong."
    expected = reference.cycles(n, n, length, n, n, "os")
    if trace.cycles != expected:
        return f"{where}, the product is right but takes " + unredacted(
            f"{trace.cycles} cycles instead of {expected}.", "another number of cycles than the reference's.")
    return ""


@check(points=2)
def skew(student, rng, hidden):
    """skew(t, n, length) delays stream i by i cycles, and sends -1 before a stream starts and after it ends."""
    cases = SKEW_HIDDEN + [(int(rng.integers(1, 7)), int(rng.integers(1, 13))) for _ in range(2)] if hidden \
        else SKEW_VISIBLE
    for i, (n, length) in enumerate(cases, 1):
        label = (f"{'hidden case' if hidden else 'case'} {i} of {len(cases)} "
                 f"(n={describe(n)}, length={describe(length)})")
        table = _skew_table(student, n, length)
        for t, got in enumerate(table):
            expected = reference.skew(t, n, length)
            if not np.array_equal(got, expected):
                stream = int(np.flatnonzero(got != expected)[0])
                differs = unredacted(f"returned {got.tolist()}, expected {expected.tolist()}",
                                     f"differs from the reference's first at stream {stream}")
                raise CheckFailure(
                    f"{label}: skew({t}, {describe(n)}, {describe(length)}) {differs}. "
                    f"{_skew_hint(table, n)}{_skew_consequence(table, n, length, rng)}")


# ---------------------------------------------------------------------------------------------- steps

# (rows, cols, m, k, n, dtype): an m x k by k x n product on a rows x cols array. For OS the tile of C
# is m x n (m <= rows, n <= cols); for WS the weights are k x n (k <= rows, n <= cols) and m streams.
STEP_VISIBLE = {"os": [(3, 3, 3, 4, 3, "int32"), (2, 4, 2, 3, 4, "float32")],
                "ws": [(3, 3, 6, 3, 3, "int32"), (2, 4, 5, 2, 4, "float32")]}
STEP_HIDDEN = {
    "os": [(1, 1, 1, 1, 1, "int32"),  # 1 x 1 array, K = 1
           (1, 1, 1, 5, 1, "float64"),  # 1 x 1 array
           (3, 4, 3, 1, 4, "int32"),  # K = 1
           (4, 5, 2, 6, 3, "int8"),  # a tile smaller than the array: idle PEs
           (5, 5, 5, 7, 5, "float32"),  # square, full
           (3, 6, 3, 9, 6, "int32")],  # rectangular: M, N and K all different
    "ws": [(1, 1, 1, 1, 1, "int32"),
           (1, 1, 5, 1, 1, "float64"),  # 1 x 1 array, M = 5
           (4, 3, 1, 4, 3, "int32"),  # M = 1 (one activation row: decoding)
           (5, 4, 3, 2, 3, "int8"),  # weights smaller than the array: partial sums pass idle rows
           (5, 5, 7, 5, 5, "float32"),
           (6, 3, 8, 6, 3, "int32")],
}


def _random_step_case(rng, dataflow: str) -> tuple:
    rows, cols = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    fixed, stream = int(rng.integers(1, rows + 1)), int(rng.integers(1, 13 if dataflow == "os" else 9))
    n = int(rng.integers(1, cols + 1))
    m, k = (fixed, stream) if dataflow == "os" else (stream, fixed)
    dtype = str(rng.choice(["int32", "float32", "float64"]))
    return rows, cols, m, k, n, dtype


def _bridged(student, function: str):
    """The student's step as the model calls it: positional plain arrays in, whatever comes back out."""
    return lambda *registers: student.call(function, *registers)


def _compare_runs(mine, theirs) -> None:
    """A run that obeyed the rules matches the reference's; checked anyway, piece by piece."""
    if not mine.complete:
        raise CheckFailure(f"the run did not finish within {mine.cycles} cycles")
    assert_close(mine.output, theirs.output, where="the product")
    if mine.cycles != theirs.cycles:
        raise CheckFailure(f"the run took {mine.cycles} cycles, the reference's {theirs.cycles}")
    assert_close(mine.utilisation, theirs.utilisation, rtol=0, atol=1e-12, where="busy PEs per cycle")


def _step_check(student, rng, hidden: bool, dataflow: str) -> None:
    cases = STEP_HIDDEN[dataflow] + [_random_step_case(rng, dataflow) for _ in range(2)] if hidden \
        else STEP_VISIBLE[dataflow]
    function = STEP_NAMES[dataflow]
    for i, (rows, cols, m, k, n, dtype) in enumerate(cases, 1):
        A, B = _matrices(rng, m, k, n, dtype)
        label = (f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {NAMES[dataflow]} {rows} x {cols} "
                 f"array, A {m} x {k} @ B {k} x {n}, {dtype}")
        expected = run(A, B, rows, cols, dataflow, step=reference.STEPS[dataflow], skew=reference.skew)
        try:
            with _registers_unquoted():
                mine = run(A, B, rows, cols, dataflow, step=_bridged(student, function), skew=reference.skew)
            _compare_runs(mine, expected)
        except (CheckFailure, ValueError) as failure:
            raise CheckFailure(f"{label}: {failure}") from None


@check(points=3)
def os_step(student, rng, hidden):
    """os_step moves a right and b down one PE per cycle and adds a*b in place; the array computes A @ B."""
    _step_check(student, rng, hidden, "os")


@check(points=3)
def ws_step(student, rng, hidden):
    """ws_step moves x right and partial sums down one PE per cycle, adding x*w; the array computes A @ B."""
    _step_check(student, rng, hidden, "ws")


# ---------------------------------------------------------------------------------------------- cycles

CYCLES_VISIBLE = [(4, 4, 8, 4, 4, "os"), (8, 4, 4, 4, 4, "ws"), (1024, 1024, 1024, 256, 256, "ws")]
CYCLES_HIDDEN = [
    (1, 1, 1, 1, 1, "os"), (1, 1, 1, 1, 1, "ws"),  # the smallest
    (3, 2, 5, 4, 4, "os"), (3, 2, 5, 4, 4, "ws"),  # one tile smaller than the array
    (8, 8, 8, 4, 4, "os"), (8, 8, 8, 4, 4, "ws"),  # exact multiples
    (10, 7, 13, 3, 5, "os"), (10, 7, 13, 3, 5, "ws"),  # ragged along every dimension
    (5, 6, 1, 2, 3, "os"), (5, 6, 1, 2, 3, "ws"),  # K = 1
    (1, 8192, 8192, 128, 128, "ws"), (1, 8192, 8192, 128, 128, "os"),  # decoding one token on a TPU-sized array
    (65536, 65536, 65536, 128, 128, "os"), (65536, 65536, 65536, 128, 128, "ws"),  # big
]
# Both dataflows on a 1 x 1 array, from 2^12 tiles to 2^32, 4 times as many each step: the closed form answers at
# once, a loop over every tile passes the budget at about 2^20 tiles and could never reach the last.
CYCLES_GROWING = [case for size in (2**e for e in range(6, 17))
                  for case in ((size, size, 3, 1, 1, "os"), (3, size, size, 1, 1, "ws"))]
CYCLES_BUDGET = 0.1  # seconds a call may take at any size (a bridge call costs about 4 ms)
CYCLES_SLOW = ("A loop over every tile cannot finish at the sizes these cases grow to (2^32 tiles of a 1 x 1 array): "
               "sum the tiles in closed form, using that along each dimension their sizes add up to M, N and K.")


def _tiles(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> int:
    return -(-N // cols) * (-(-M // rows) if dataflow == "os" else -(-K // rows))


def _random_cycles_case(rng, dataflow: str) -> tuple:
    M, N, K = (int(10 ** rng.uniform(0, 4)) for _ in range(3))
    return M, N, K, int(rng.choice([1, 3, 8, 128, 256])), int(rng.choice([1, 4, 8, 128])), dataflow


def _cycles_hint(case: dict, got, expected) -> str:
    """What a wrong count most likely left out, from the counts that typical mistakes give (in closed form:
    the hidden cases have up to 10^8 tiles)."""
    M, N, K, rows, cols, dataflow = case.values()
    tiles_n = -(-N // cols)
    tiles_other = -(-M // rows) if dataflow == "os" else -(-K // rows)  # along M (OS) or K (WS)
    tiles = tiles_other * tiles_n
    off_by_one = "When the first multiply-add is in cycle 0 and the last in cycle c, the run takes c + 1 cycles"
    mistakes = {expected + tiles: off_by_one, expected - tiles: off_by_one}
    if dataflow == "os":
        mistakes[tiles * K] = ("Each tile takes more than K cycles: the wavefront needs m - 1 + n - 1 cycles more "
                               "to fill the tile and drain from it")
        mistakes[tiles * (K + rows + cols - 2)] = ("A ragged tile of m x n outputs finishes in K + m + n - 2 cycles: "
                                                   "its last output is at PE(m-1, n-1)")
        mistakes[K + M + N - 2] = "The product is cut into tiles of the array's size, each with its own fill and drain"
    else:
        mistakes[expected - tiles_n * K] = ("The weights must be loaded first: k cycles per tile, shifting k rows "
                                            "of B down from the top")
        mistakes[2 * tiles_n * K + tiles * (M - 2) + tiles_other * N] = (
            "Partial sums leave from the bottom row of the array, rows - 1 hops below row 0, even when a ragged "
            "tile has fewer than `rows` rows of weights")
        mistakes[M + N + 2 * K - 2] = "The product is cut into tiles of the array's size, each loaded and drained"
    mistakes.pop(expected, None)
    return mistakes.get(got, "")


@check(points=2)
def cycles(student, rng, hidden):
    """cycles(M, N, K, rows, cols, dataflow) counts the cycles of the tiled product, tile after tile, in closed form."""
    fixed = CYCLES_HIDDEN + [_random_cycles_case(rng, d) for d in ("os", "ws") for _ in range(3)] if hidden \
        else CYCLES_VISIBLE
    small = [case for case in fixed if _tiles(*case) <= 2**12]  # a loop over the tiles meets the growing cases first
    cases = small + CYCLES_GROWING + [case for case in fixed if case not in small]
    compare_cases(student, "cycles", [dict(zip(("M", "N", "K", "rows", "cols", "dataflow"), case)) for case in cases],
                  reference.cycles, returns="integer", hidden=hidden, hint=_cycles_hint, budget=CYCLES_BUDGET,
                  slow=CYCLES_SLOW, call=lambda case: _call("cycles", tuple(case.values())))


# ---------------------------------------------------------------------------------------------- schedule

SCHEDULE_VISIBLE = [(7, 5, 6, 4, 4, "os", "int32"), (6, 7, 9, 4, 3, "ws", "int32")]
SCHEDULE_HIDDEN = [
    (8, 8, 8, 4, 4, "os", "int32"), (8, 8, 8, 4, 4, "ws", "int32"),  # exact multiples
    (3, 2, 2, 4, 4, "os", "int32"), (3, 2, 2, 4, 4, "ws", "int32"),  # smaller than the array: one tile
    (3, 2, 5, 1, 1, "os", "int32"), (3, 2, 5, 1, 1, "ws", "int32"),  # 1 x 1 array
    (10, 7, 13, 3, 5, "os", "int32"), (10, 7, 13, 3, 5, "ws", "int32"),  # ragged along every dimension
    (5, 6, 1, 2, 3, "os", "float64"), (5, 6, 1, 2, 3, "ws", "float32"),  # K = 1
]


def _random_schedule_case(rng, dataflow: str) -> tuple:
    M, N, K = (int(rng.integers(1, 15)) for _ in range(3))
    return M, N, K, int(rng.integers(2, 6)), int(rng.integers(2, 6)), dataflow, str(rng.choice(["int32", "float64"]))


def _coverage(tiles: list, M: int, N: int, K: int) -> np.ndarray:
    """How many tiles compute each product A[m, k] * B[k, n], as an (M, N, K) count; CheckFailure on a bad tile."""
    count = np.zeros((M, N, K), np.int64)
    for i, tile in enumerate(tiles):
        try:
            ms, ns, ks = tile_ranges(tile, M, N, K, f"tile {i}")
        except ValueError as error:  # its text quotes the sizes of the product, a hidden case's
            raise CheckFailure(unredacted(str(error), f"tile {i} must be a dict with keys 'm', 'n' and 'k', each "
                                                      "[start, stop] with 0 <= start < stop <= that size")) from None
        count[ms, ns, ks] += 1
    return count


def _coverage_failure(count: np.ndarray, case: tuple) -> str | None:
    """Which products no tile computes, or more than one does, and why it may be; None if each is computed once."""
    M, N, K, rows, cols, dataflow, _ = case
    for bad, what in ((count == 0, "no tile computes"), (count > 1, "more than one tile computes")):
        if bad.any():
            m, n, k = (int(v) for v in np.argwhere(bad)[0])
            text = f"{what} the product A[{m}, {k}] * B[{k}, {n}] (of C[{m}, {n}])"
            cuts = [("M", M, rows, m)] if dataflow == "os" else [("K", K, rows, k)]
            for name, size, step, at in cuts + [("N", N, cols, n)]:
                if what.startswith("no") and size % step and at >= size - size % step:
                    text += unredacted(f": {name} = {size} is not a multiple of {step}, and the last, ragged tile "
                                       f"along {name} (of {size % step}) is missing",
                                       f": {name} is not a multiple of the array's size along it, and the last, "
                                       f"ragged tile along {name} is missing")
                    break
            return text
    return None


def _schedule_cycles_hint(tiles: list, case: tuple) -> str:
    M, N, K, rows, cols, dataflow, _ = case
    if dataflow == "os" and any(t["k"] != [0, K] for t in tiles):
        return ("output-stationary streams K whole through each tile: splitting K pays the fill and drain of "
                "the array once more for every piece")
    if dataflow == "ws" and any(t["m"] != [0, M] for t in tiles):
        return ("weight-stationary streams all M rows of A past one tile of weights: splitting M loads the same "
                "weights again and refills the array for every piece")
    fewest = len(reference.schedule(M, N, K, rows, cols, dataflow))
    return (f"your {len(tiles)} tiles are smaller than they need to be: "
            + unredacted(f"{fewest} tiles of up to {rows} x {cols}", "fewer tiles, each up to rows x cols,")
            + " cover the product, and every tile pays for the fill and drain of the array")


@check(points=2)
def schedule(student, rng, hidden):
    """schedule(M, N, K, rows, cols, dataflow) cuts any product into tiles that fit the array, each product once."""
    cases = SCHEDULE_HIDDEN + [_random_schedule_case(rng, d) for d in ("os", "ws") for _ in range(2)] if hidden \
        else SCHEDULE_VISIBLE
    for i, case in enumerate(cases, 1):
        M, N, K, rows, cols, dataflow, dtype = case
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {_call('schedule', case)}"
        tiles = student.call("schedule", M=M, N=N, K=K, rows=rows, cols=cols, dataflow=dataflow, returns="list")
        try:
            problem = _coverage_failure(_coverage(tiles, M, N, K), case)
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {failure}") from None
        if problem:
            raise CheckFailure(f"{label}: {problem}")
        A, B = _matrices(rng, M, K, N, dtype)
        try:  # the tiles run here, on the model, with the reference's steps: the product and cycles are measured
            with _registers_unquoted():
                done = run_schedule(A, B, rows, cols, dataflow, tiles, step=reference.STEPS[dataflow],
                                    skew=reference.skew)
        except ValueError as error:
            raise CheckFailure(f"{label}: {error}") from None
        expected, expected_cycles = reference.matmul(A, B, rows, cols, dataflow)
        try:
            assert_close(done.output, expected, where="the product")
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {failure}") from None
        if done.cycles != expected_cycles:
            cycles = unredacted(f"take {done.cycles} cycles, the reference's {expected_cycles}",
                                "take another number of cycles than the reference's")
            raise CheckFailure(f"{label}: your {len(tiles)} tiles {cycles}: {_schedule_cycles_hint(tiles, case)}")
