"""Checks: the eight collectives on simulated ranks, two compositions of all-reduce,
and the bytes each composition moves.

Every case compares the student's list of per-rank arrays with aisys.collectives.simulated on
the same buffers. Visible cases: 3 and 4 ranks, float32, one root. Hidden cases: 1 to 6 ranks,
every root, every op, seven dtypes, one- and two-axis buffers, block lengths of one element,
int8 sums that wrap and int64 sums beyond 2^53, where a float accumulator rounds.
Data-moving collectives get buffers whose elements are all distinct, so a misplaced block is
named by where it came from ("rank 2 block 1 holds rank 2's block 1; expected rank 1's block
2"); reductions get small integers, exact in every dtype and any order of summation.
"""

import numpy as np

from aisys.collectives import simulated

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure

DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8")
ROOTED = ("broadcast", "scatter", "gather", "reduce")
REDUCING = ("reduce", "all_reduce", "reduce_scatter", "all_reduce_via_reduce_scatter", "all_reduce_via_reduce")
# What a student's block is measured in: a whole buffer, or one of p blocks of it.
UNIT = {"broadcast": "buffer", "gather": "buffer", "reduce": "buffer", "all_reduce": "buffer",
        "all_gather": "buffer", "scatter": "block", "reduce_scatter": "block", "all_to_all": "block"}
HINTS = {
    "broadcast": "broadcast gives every rank a copy of the root's buffer.",
    "scatter": "scatter gives rank r block r of the root's buffer: np.split(buffers[root], p)[r], "
               "one p-th of it, not the whole buffer.",
    "gather": "gather concatenates every buffer in rank order at the root, the rank named by `root`; "
              "every other rank keeps its own buffer.",
    "reduce": "reduce combines every buffer with `op` at the root only; every other rank keeps its own buffer.",
    "all_reduce": "all_reduce gives every rank `op` over every buffer, in the buffers' dtype.",
    "all_gather": "all_gather gives every rank all buffers concatenated in rank order (rank 0's first), "
                  "not in the order they would arrive in.",
    "reduce_scatter": "reduce_scatter gives rank r block r of the reduction over every rank (not block r + 1, "
                      "where a ring leaves it, and not the sum of rank r's own blocks).",
    "all_to_all": "all_to_all sends rank r's block j to rank j, where it becomes block r: it transposes the "
                  "(rank, block) table; blocks are whole rows of p equal parts of the first axis.",
}
IDENTITY_HINT = ("both compositions must equal all_reduce; they use your reduce_scatter and all_gather, or reduce "
                 "and broadcast, so a mistake there shows here too.")


def _distinct(rng, p: int, shape: tuple, dtype: str) -> list[np.ndarray]:
    """Buffers whose elements are all different (at most 256 of them: exact in int8, uint8 and float16)."""
    size = int(np.prod(shape))
    values = rng.permutation(p * size) - (128 if dtype == "int8" else 0)
    return [values[r * size:(r + 1) * size].reshape(shape).astype(dtype) for r in range(p)]


def _small(rng, p: int, shape: tuple, dtype: str, op: str) -> list[np.ndarray]:
    """Small integers whose sum, product, min and max are exact in every dtype, for any order of reduction."""
    unsigned = dtype == "uint8"
    if op == "product":
        choices = [1, 2] if unsigned else [-2, -1, 1, 2]
        return [rng.choice(choices, size=shape).astype(dtype) for _ in range(p)]
    return [rng.integers(0 if unsigned else -8, 9, size=shape).astype(dtype) for _ in range(p)]


def _shape(rng, p: int, split: bool) -> tuple:
    """A buffer shape: a multiple of p where blocks are needed (one-element blocks included), else any length."""
    length = p * int(rng.integers(1, 4)) if split else int(rng.integers(1, 8))
    return (length, 2) if rng.random() < 0.3 else (length,)


def _cases(rng, function: str, hidden: bool, split: bool = False, moves: bool = True) -> list[dict]:
    """Keyword arguments for `function`: fixed visible cases, or 1 to 6 ranks x every root, op and dtype."""
    rooted = function in ROOTED or function == "all_reduce_via_reduce"
    reducing = function in REDUCING
    if not hidden:
        cases = []
        for p, root, op in ((3, 2, "sum"), (4, 1, "max")):
            buffers = [np.arange(2 * p, dtype=np.float32) + 100 * rank for rank in range(p)]
            cases.append({"buffers": buffers} | ({"root": root} if rooted else {}) | ({"op": op} if reducing else {}))
        return cases
    cases = []
    dtypes = iter(np.roll(DTYPES, int(rng.integers(len(DTYPES)))).tolist() * 10)  # every dtype, in turn
    for p in range(1, 7):
        for root in (range(p) if rooted else [None, None]):  # every root; two cases per p for the others
            dtype, shape = next(dtypes), _shape(rng, p, split)
            op = str(rng.choice(list(simulated.OPS))) if reducing else "sum"
            buffers = _distinct(rng, p, shape, dtype) if moves else _small(rng, p, shape, dtype, op)
            cases.append({"buffers": buffers} | ({"root": root} if rooted else {}) | ({"op": op} if reducing else {}))
    if reducing:  # every op at least once on a ragged world size, with the last root; then an int8 sum that wraps
        for op in simulated.OPS:
            buffers = _small(rng, 5, (5 * int(rng.integers(1, 3)),), next(dtypes), op)
            cases.append({"buffers": buffers} | ({"root": 4} if rooted else {}) | {"op": op})
        overflowing = [np.array([100, -100, 27], np.int8), np.array([90, -90, 50], np.int8),
                       np.array([80, -80, 60], np.int8)]  # sums 270, -270, 137: outside int8, as in torch they wrap
        cases.append({"buffers": overflowing} | ({"root": 1} if rooted else {}) | {"op": "sum"})
        # int64 beyond 2^53, where a float64 accumulator rounds (float32's beyond 2^24)
        huge = [np.array([2**60 + 1, -2**60 - 3, 7], np.int64), np.array([2**59 + 5, 2**58 + 1, -2**53 - 1], np.int64),
                np.array([3, 2**60 + 11, 2**55 + 1], np.int64)]
        cases.append({"buffers": huge} | ({"root": 2} if rooted else {}) | {"op": "sum"})
    return cases


def _call_text(function: str, case: dict) -> str:
    buffers = case["buffers"]
    rest = "".join(f", {key}={value!r}" for key, value in case.items() if key != "buffers")
    return f"{function}(buffers=<{len(buffers)} ranks, each {buffers[0].dtype} of shape {buffers[0].shape}>{rest})"


def _origins(case: dict, unit: str) -> list[tuple[str, np.ndarray]]:
    """Every piece a correct result could hold, with its name: each rank's buffer or block, and their reductions."""
    buffers = case["buffers"]
    p = len(buffers)
    split = unit == "block" and buffers[0].shape[0] % p == 0
    pieces = []
    if "op" in case:
        reduced = simulated.all_reduce(buffers, case["op"])[0]
        pieces += [(f"the {case['op']} of every rank's {'block ' + str(j) if split else 'buffer'}", piece)
                   for j, piece in enumerate(np.split(reduced, p) if split else [reduced])]
    for r, buffer in enumerate(buffers):
        pieces += [(f"rank {r}'s {'block ' + str(j) if split else 'buffer'}", piece)
                   for j, piece in enumerate(np.split(buffer, p) if split else [buffer])]
    return pieces


def _name(piece: np.ndarray, origins) -> str:
    """Every origin the piece equals (a min or max can equal some rank's own block), or that it equals none."""
    names = [name for name, origin in origins if piece.shape == origin.shape and np.array_equal(piece, origin)]
    if names:
        return " = ".join(names[:2])
    return "values that are no rank's " + ("block" if "block" in origins[-1][0] else "buffer")


def _whole(array: np.ndarray, buffers: list[np.ndarray]) -> str:
    """' (rank r's whole buffer)' or ' (every buffer, concatenated)' when an array of the wrong shape is one."""
    candidates = [(f"rank {r}'s whole buffer", b) for r, b in enumerate(buffers)]
    candidates.append(("every buffer, concatenated in rank order", np.concatenate(buffers)))
    return next((f" ({name})" for name, b in candidates if b.shape == array.shape and np.array_equal(b, array)), "")


def _first_difference(got: np.ndarray, expected: np.ndarray, unit_rows: int, origins) -> str:
    """Where got first differs from expected: by block, named by origin when the block is a whole piece."""
    for start in range(0, expected.shape[0], unit_rows):
        mine, theirs = got[start:start + unit_rows], expected[start:start + unit_rows]
        if not np.array_equal(mine, theirs):
            where = f" block {start // unit_rows}" if expected.shape[0] > unit_rows else ""
            return f"{where} holds {_name(mine, origins)}; expected {_name(theirs, origins)}"
    return ""


def _ranks_match(function: str, got, expected: list[np.ndarray], case: dict, hint: str) -> None:
    """CheckFailure naming the first rank whose result differs in kind, shape, dtype or placement of blocks."""
    p = len(case["buffers"])
    if not isinstance(got, list) or len(got) != p:
        raise CheckFailure(f"expected a list of {p} arrays, one per rank; got {type(got).__name__}"
                           f"{' of length ' + str(len(got)) if isinstance(got, list) else ''}. {hint}")
    unit = UNIT.get(function, "buffer")
    unit_rows = case["buffers"][0].shape[0] // (p if unit == "block" else 1)
    origins = _origins(case, unit)
    for rank, (mine, theirs) in enumerate(zip(got, expected)):
        if not isinstance(mine, np.ndarray):
            raise CheckFailure(f"rank {rank} holds a {type(mine).__name__}; expected a numpy array")
        if mine.shape != theirs.shape:
            raise CheckFailure(f"rank {rank} holds an array of shape {mine.shape}{_whole(mine, case['buffers'])}; "
                               f"expected shape {theirs.shape}. {hint}")
        if mine.dtype != theirs.dtype:
            raise CheckFailure(f"rank {rank} holds dtype {mine.dtype}; expected {theirs.dtype}, the buffers' dtype: "
                               "a collective does not change it (np.sum widens small integers to int64; "
                               "fold with np.add(a, b, dtype=a.dtype))")
        if not np.array_equal(mine, theirs):
            if mine.dtype.kind in "iu" and np.allclose(mine.astype(float), theirs.astype(float), rtol=1e-6, atol=0):
                raise CheckFailure(f"rank {rank} holds values close to the expected ones but not equal: integers "
                                   "rounded on the way through a float (float64 holds integers exactly only up to "
                                   "2^53); reduce integers in their own dtype")
            raise CheckFailure(f"rank {rank}{_first_difference(mine, theirs, unit_rows, origins)}. {hint}")


def _delivers(student, function: str, cases: list[dict], reference, hint: str, hidden: bool) -> None:
    """Each case against `reference`, rank by rank (_ranks_match)."""
    compare_cases(student, function, cases, reference, returns="list", hidden=hidden,
                  compare=lambda got, expected, case: _ranks_match(function, got, expected, case, hint),
                  call=lambda case: _call_text(function, case))


def _check_each(student, rng, hidden, functions: dict[str, tuple[bool, bool]]) -> None:
    """functions: name -> (needs blocks, moves data unchanged)."""
    for function, (split, moves) in functions.items():
        _delivers(student, function, _cases(rng, function, hidden, split, moves), getattr(simulated, function),
                  HINTS[function], hidden)


@check(points=4)
def rooted(student, rng, hidden):
    """broadcast, scatter, gather and reduce deliver what torch.distributed does, at every root."""
    _check_each(student, rng, hidden, {"broadcast": (False, True), "scatter": (True, True),
                                       "gather": (False, True), "reduce": (False, False)})


@check(points=1)
def all_reduce(student, rng, hidden):
    """all_reduce gives every rank the reduction of every buffer, for each op and dtype."""
    _check_each(student, rng, hidden, {"all_reduce": (False, False)})


@check(points=2)
def all_gather_reduce_scatter(student, rng, hidden):
    """all_gather concatenates in rank order; reduce_scatter gives rank r block r of the reduction."""
    _check_each(student, rng, hidden, {"all_gather": (False, True), "reduce_scatter": (True, False)})


@check(points=2)
def all_to_all(student, rng, hidden):
    """all_to_all sends rank r's block j to rank j's block r."""
    _check_each(student, rng, hidden, {"all_to_all": (True, True)})


@check(points=1)
def identities(student, rng, hidden):
    """all_reduce = reduce_scatter then all_gather = reduce then broadcast, with the student's own functions."""
    for function in ("all_reduce_via_reduce_scatter", "all_reduce_via_reduce"):
        cases = _cases(rng, function, hidden, split=function == "all_reduce_via_reduce_scatter", moves=False)

        def reference(buffers, op="sum", root=None):
            return simulated.all_reduce(buffers, op)

        _delivers(student, function, cases, reference, IDENTITY_HINT, hidden)


def _composition_traffic(world_size: int, nbytes: int) -> dict:
    """The two compositions of all_reduce, in naive form, root 0: the parameter server against the ring's counts."""
    traffic = simulated.naive_traffic

    def as_dict(t):
        return {"sent": list(t.sent), "received": list(t.received)}

    p, n = world_size, nbytes
    server = traffic("reduce", p, n) + traffic("broadcast", p, n)
    ring = traffic("reduce_scatter", p, n) + traffic("all_gather", p, n / p)  # all_gather moves the reduced blocks
    return {"reduce_then_broadcast": as_dict(server), "reduce_scatter_then_all_gather": as_dict(ring)}


@check(points=2)
def composition_traffic(student, rng, hidden):
    """composition_traffic counts (p-1)n each way on the root's link against 2(p-1)/p n on every rank's."""
    cases = [{"world_size": 4, "nbytes": 1024}, {"world_size": 8, "nbytes": 2**30}]
    if hidden:
        cases = [{"world_size": 1, "nbytes": 4096}, {"world_size": 2, "nbytes": 2}, {"world_size": 3, "nbytes": 3}]
        for _ in range(8):
            p = int(rng.integers(2, 1025))
            cases.append({"world_size": p, "nbytes": p * int(rng.integers(1, 2**20))})
    try:
        compare_cases(student, "composition_traffic", cases, _composition_traffic, returns="mapping", hidden=hidden)
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}. In reduce then broadcast, rank 0 receives p - 1 buffers and sends p - 1; "
                           "every other rank sends one and receives one. In reduce-scatter then all-gather, every "
                           "rank sends p - 1 blocks of nbytes / p in each step, and receives as many.") from None
