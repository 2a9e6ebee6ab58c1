"""Checks: a ring reduce-scatter, all-gather and all-reduce on real processes.

The student's functions run on 1 to 5 processes in one gloo process group (two GPUs over NCCL
for the last check), all cases of one world size in one `call_ranks`. Every rank's tensor is
compared with the grader's own sum of the inputs (int64 exactly, on values that a float
accumulator rounds; floats within the error that any order of p - 1 additions can make); a
wrong element is named by what it holds, which the inputs make recognisable: they differ on
every rank, so one rank's input or a sum over some of the ranks can be told apart. The
recorded messages must follow the ring: to (r + 1) % p only, from (r - 1) % p only, p - 1 per
phase, the bytes of one chunk each. Empty chunks (n < p) may be sent as zero-element messages
or skipped.
"""

import itertools

import numpy as np

from aisys.collectives import ring

from aisys_grader.checks import case_on_ranks, check, require_gpu
from aisys_grader.compare import CheckFailure, describe, raised, redacting, unredacted

DTYPES = ("float32", "float64", "int64")
EPSILON = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}
PHASES = {"ring_reduce_scatter": "reduce_scatter", "ring_all_gather": "all_gather", "ring_all_reduce": "all_reduce"}
VISIBLE = [(4, 8, "float32"), (3, 10, "float64"), (2, 5, "int64")]  # (p, n, dtype)
LARGE = 20_000  # elements of the largest hidden case: large enough for many-chunk bugs, small enough for 8 s


# ---------------------------------------------------------------------------------------------- cases


def _inputs(rng, p: int, n: int, dtype: str) -> list[np.ndarray]:
    """One array per rank, distinct on every rank: floats in [-100, 100); integers beyond 2^53, which a sum
    through float64 (let alone float32) rounds, and below 2^60, so that the sum of 5 fits in int64."""
    if dtype == "int64":
        return [rng.integers(-2**60, 2**60, n, dtype=np.int64) for _ in range(p)]
    return [rng.uniform(-100, 100, n).astype(dtype) for _ in range(p)]


def _lengths(rng, p: int) -> list[int]:
    """Empty, one element, fewer than p, a prime, a ragged one, and a large one."""
    fewer = [int(rng.integers(2, p))] if p > 2 else []
    prime = int(rng.choice([13, 31, 97, 101, 211]))
    return [0, 1, *fewer, prime, int(rng.integers(p + 1, 400)), int(rng.integers(LARGE // 2, LARGE))]


def _cases(rng, hidden: bool, world_sizes=(3, 4, 5, 2, 1)) -> dict[int, list[tuple[int, str]]]:
    """(n, dtype) cases by world size; every dtype at least once per world size."""
    if not hidden:
        return {p: [(n, dtype)] for p, n, dtype in VISIBLE}
    by_size = {}  # in the order of world_sizes: 3 ranks first, where a root and a ring differ most plainly
    for p in world_sizes:
        lengths = _lengths(rng, p)
        dtypes = [DTYPES[(i + p) % len(DTYPES)] for i in range(len(lengths))]
        by_size[p] = list(zip(lengths, dtypes))
    return by_size


def _reduced(inputs: list[np.ndarray]) -> np.ndarray:
    """The exact sum for integers; for floats the sum in float64, compared within a bound below."""
    wide = np.int64 if inputs[0].dtype.kind == "i" else np.float64
    return np.sum([x.astype(wide) for x in inputs], axis=0)


def _gather_layout(inputs: list[np.ndarray], total: np.ndarray, p: int) -> list[np.ndarray]:
    """The all-gather's input: rank r holds chunk (r + 1) % p of the sum and its own input elsewhere."""
    bounds = ring.chunk_bounds(total.size, p)
    layouts = []
    for rank, x in enumerate(inputs):
        start, stop = bounds[(rank + 1) % p]
        layout = x.copy()
        layout[start:stop] = total[start:stop].astype(x.dtype)
        layouts.append(layout)
    return layouts


# ---------------------------------------------------------------------------------------------- values


def _close(got: np.ndarray, expected: np.ndarray, inputs: list[np.ndarray]) -> np.ndarray:
    """Elementwise: equal for integers; for floats within the error of p - 1 roundings of partial sums."""
    if got.dtype.kind == "i":
        return got == expected
    p = len(inputs)
    bound = 2 * p * EPSILON[str(got.dtype)] * np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0)
    return np.abs(got.astype(np.float64) - expected) <= bound + 1e-30


def _what_it_holds(value, index: int, inputs: list[np.ndarray]) -> tuple[str, frozenset]:
    """Name the value at `index` as one rank's input or a sum over some ranks' inputs, if it is one."""
    p = len(inputs)
    column = [x[index:index + 1] for x in inputs]
    for size in range(1, p + 1):
        for ranks in itertools.combinations(range(p), size):
            part = [column[r] for r in ranks]
            if _close(np.array([value], dtype=inputs[0].dtype), _reduced(part), part)[0]:
                if size == 1:
                    return f"rank {ranks[0]}'s input", frozenset(ranks)
                return f"the sum over ranks {', '.join(map(str, ranks))} only", frozenset(ranks)
    return "no sum of the ranks' inputs", frozenset()


def _rounded(got, expected, index: int, inputs: list[np.ndarray]) -> bool:
    """Whether an integer result is the sum rounded as a float32 or float64 accumulator rounds it."""
    if got.dtype.kind != "i":
        return False
    bound = 2 * len(inputs) * EPSILON["float32"] * sum(abs(float(x[index])) for x in inputs)
    return abs(float(got[index]) - float(expected[index])) <= bound


def _value_hint(function: str, rank: int, ranks: frozenset, p: int, rounded: bool = False) -> str:
    if rounded:
        return ("it went through a floating-point number; add int64 tensors as int64 (float64 holds integers "
                "exactly only up to 2^53)")
    if not ranks:
        return "was a chunk added twice, added into the wrong chunk, or received into the wrong place?"
    if ranks == {rank}:
        return ("this element still holds the rank's own input: nothing arrived here. "
                + ("Does the all-gather run p - 1 steps, overwriting chunk (r - s) % p in step s?"
                   if function != "ring_reduce_scatter" else
                   "Does step s add the chunk received into chunk (r - s - 1) % p?"))
    if len(ranks) == 1:
        return "this is another rank's input, not reduced: a chunk was copied before it was complete"
    return (f"a partial sum over {len(ranks)} of {p} ranks: a chunk was passed on before it collected every "
            "contribution. Does the reduce-scatter run p - 1 steps, sending chunk (r - s) % p and adding the "
            "received one into chunk (r - s - 1) % p, so that rank r ends with chunk (r + 1) % p complete?")


def _check_values(function: str, outcome: dict, rank: int, inputs, expected: np.ndarray, checked: slice) -> None:
    tensors = outcome.get("tensors") or []
    got = tensors[0] if tensors and isinstance(tensors[0], np.ndarray) else None
    if got is None or got.shape != expected.shape:
        raise CheckFailure(f"rank {rank}'s tensor could not be read back after the call")
    good = _close(got[checked], expected[checked], [x[checked] for x in inputs])
    if good.all():
        return
    value = outcome.get("value")
    if isinstance(value, np.ndarray) and value.shape == expected.shape and \
            _close(value[checked], expected[checked], [x[checked] for x in inputs]).all():
        raise CheckFailure(f"rank {rank} returned the right result but left its tensor unchanged: "
                           f"{function} must work in place (add into slices of `tensor`, which are views)")
    index = int(np.flatnonzero(~good)[0]) + (checked.start or 0)
    what, ranks = _what_it_holds(got[index], index, inputs)
    chunk = next(c for c, (start, stop) in enumerate(ring.chunk_bounds(expected.size, len(inputs)))
                 if start <= index < stop)
    wrong = int((~good).sum())
    form = "d" if got.dtype.kind == "i" else ".8g"
    values = unredacted(f", {expected[index]:{form}}, but holds {got[index]:{form}} =", ", but holds")  # hidden data
    rounded = not ranks and _rounded(got, expected, index, inputs)
    what = "the sum, rounded" if rounded else what
    raise CheckFailure(f"rank {rank}: {wrong} of {good.size} checked elements are wrong; element {index} "
                       f"(chunk {chunk}) should be the sum over all {len(inputs)} ranks{values} {what}: "
                       f"{_value_hint(function, rank, ranks, len(inputs), rounded)}")


# ---------------------------------------------------------------------------------------------- traffic


def _error_text(function: str, p: int, rank: int, error: str) -> str:
    """What a rank's error means: a collective called, a deadlock, or anything else as it was raised (inside
    `redacted()`, by its name only: its text is the student's code's)."""
    if error.startswith("CollectiveNotAllowed"):
        called = error.split(" was called")[0].split("dist.")[-1]
        called = unredacted(f"dist.{called}", "a torch.distributed collective")
        return (f"{function} called {called}: the exercise is to build it from sends and receives "
                "(dist.batch_isend_irecv, or dist.isend and dist.irecv) to the ring's neighbours")
    if "timed out waiting" in error.lower() and "send operation" in error:
        return (f"rank {rank} raised {raised(error)}: its send to rank {(rank + 1) % p} was not taken within the "
                "timeout. Either every rank waits in a blocking dist.send for its successor, which waits in its own "
                "send (a deadlock: post the send and the receive together, with dist.batch_isend_irecv or isend "
                "and irecv, then wait on both); or the successor posted no receive for it in that step (one of "
                "another size, into another chunk, or an empty chunk it skipped), or posted it with dist.irecv and "
                "never waited on it")
    if "timed out waiting" in error.lower():
        return (f"rank {rank} raised {raised(error)}. A receive waited for a message nobody sent, or for more "
                "elements than were sent: in step s rank r must receive exactly the chunk its predecessor sends, "
                "chunk (r - s - 1) % p in the reduce-scatter, (r - s) % p in the all-gather, and a blocking "
                "dist.send before dist.recv on every rank deadlocks")
    return f"rank {rank} raised {raised(error)}"


def _check_traffic(function: str, messages: list[dict], rank: int, p: int, n: int, itemsize: int) -> int:
    """CheckFailure unless this rank's messages follow the ring; the elements it sent."""
    successor, predecessor = (rank + 1) % p, (rank - 1) % p
    steps = 2 * (p - 1) if function == "ring_all_reduce" else p - 1
    sent = [m for m in messages if m["kind"] == "send"]
    received = [m for m in messages if m["kind"] == "recv"]
    strays = [m for m in sent if m["peer"] != successor]
    if strays:
        peers = sorted({m["peer"] for m in strays})
        many = len({m["peer"] for m in sent}) > 1 or len(strays) > 1
        root = ": this looks like gathering to a root (or broadcasting from one)" if many else ""
        raise CheckFailure(f"rank {rank} sent {len(strays)} message(s) to rank(s) {', '.join(map(str, peers))} "
                           f"(its ring successor is {successor}): a ring sends only to (r + 1) % p{root}")
    strays = [m for m in received if m["peer"] != predecessor]
    if strays:
        peers = ", ".join("any rank" if m["peer"] < 0 else f"rank {m['peer']}" for m in strays)
        raise CheckFailure(f"rank {rank} received from {peers} (its ring predecessor is {predecessor}): a ring "
                           "receives only from (r - 1) % p")
    elements = sum(m["numel"] for m in sent)
    largest_chunk = -(-n // p)
    if elements * itemsize > steps * largest_chunk * itemsize:
        ratio = f"{elements / n:.3g}·n" if n else f"{elements}"
        raise CheckFailure(
            f"rank {rank} sent {elements} elements ({ratio}), more than {steps} chunks of at most {largest_chunk}: "
            f"a ring sends {'2(p-1)' if steps > p - 1 else '(p-1)'}/p·n = {steps * n / p:.4g} elements per rank. "
            "Are you sending the whole tensor each step instead of one chunk?")
    nonempty = [m for m in sent if m["numel"] > 0]
    if len(sent) > steps or (n >= p and len(nonempty) != steps):
        raise CheckFailure(f"rank {rank} sent {len(nonempty)} non-empty messages ({len(sent)} in all); "
                           f"{'this phase' if steps == p - 1 else 'a ring all-reduce'} sends one chunk per step, "
                           f"{steps} steps on {p} ranks")
    return elements


def _check_world(function: str, student, p: int, cases: list[tuple[int, str]], rng, label: str,
                 backend: str = "gloo") -> None:
    """Run every case of one world size in one call_ranks; check values and traffic of each, on every rank."""
    prepared = []
    for n, dtype in cases:
        inputs = _inputs(rng, p, n, dtype)
        expected = _reduced(inputs)
        given = _gather_layout(inputs, expected, p) if function == "ring_all_gather" else inputs
        prepared.append((n, dtype, inputs, expected, given))
    try:
        outcomes = student.call_ranks(function, [[[x] for x in given] for *_, given in prepared], world_size=p,
                                      backend=backend)
    except CheckFailure as failure:
        raise CheckFailure(f"{label}, {p} rank(s): {failure}") from None
    for i, (n, dtype, inputs, expected, _) in enumerate(prepared):
        where = f"{label}, {p} rank(s), case {i + 1} of {len(prepared)}: {function}(tensor of {n} {dtype})"
        ranks = case_on_ranks(outcomes, i, where, lambda rank, error: _error_text(function, p, rank, error))
        bounds = ring.chunk_bounds(n, p)
        total = 0
        try:
            for rank, outcome in enumerate(ranks):
                total += _check_traffic(function, outcome.get("messages") or [], rank, p, n,
                                        np.dtype(dtype).itemsize)
                start, stop = bounds[(rank + 1) % p] if function == "ring_reduce_scatter" else (0, n)
                _check_values(function, outcome, rank, inputs, expected, slice(start, stop))
            steps = 2 * (p - 1) if function == "ring_all_reduce" else p - 1
            if total != steps * n:
                whole = (": are you sending the whole tensor each step instead of one chunk?" if total > steps * n
                         else "")
                raise CheckFailure(f"the ranks sent {total} elements in all; a ring sends {steps}·n = {steps * n} "
                                   f"(each of the {steps} steps moves every chunk once){whole}")
        except CheckFailure as failure:
            raise CheckFailure(f"{where}: {failure}") from None


def _check_phase(function: str, student, rng, hidden: bool) -> None:
    label = "hidden case" if hidden else "case"
    for p, cases in _cases(rng, hidden).items():
        _check_world(function, student, p, cases, rng, label)


# ---------------------------------------------------------------------------------------------- checks


@check(points=1)
def chunk_bounds(student, rng, hidden):
    """chunk_bounds(n, p) cuts n elements into p contiguous chunks, sizes within one, the larger first."""
    cases = [(10, 4), (12, 3), (2, 4)]
    if hidden:
        cases = [(0, 1), (0, 5), (1, 1), (1, 5), (3, 5), (5, 5), (6, 5), (97, 4), (10**6 + 3, 7)]
        cases += [(int(rng.integers(0, 10**5)), int(rng.integers(1, 9))) for _ in range(6)]
    for i, (n, p) in enumerate(cases, 1):
        got = student.call("chunk_bounds", n, p, returns="list")
        expected = [list(b) for b in ring.chunk_bounds(n, p)]
        if got != expected:
            sizes = [b[1] - b[0] for b in got if isinstance(b, list) and len(b) == 2 and
                     all(isinstance(v, int) for v in b)]
            hint = ""
            if len(sizes) == p and sum(sizes) < n:
                hint = (": the chunks cover " + unredacted(f"{sum(sizes)} of {n} elements; the remainder n % p = "
                                                           f"{n % p}", "fewer than n elements; the remainder n % p")
                        + " must go somewhere (one more element in each of the first n % p chunks)")
            elif len(sizes) == p and sizes == sorted(sizes):
                hint = ": give the larger chunks first (the checks and the ring's layout rely on it)"
            label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}"
            if redacting():  # n and p are the hidden case; the bounds, its answer and the student's
                raise CheckFailure(f"{label}: chunk_bounds({describe(n)}, {describe(p)}): the bounds differ from the "
                                   f"reference's{hint}")
            raise CheckFailure(f"{label}: chunk_bounds({n}, {p}) returned {str(got)[:200]}, expected "
                               f"{str(expected)[:200]}{hint}")


@check(points=2)
def ring_reduce_scatter(student, rng, hidden):
    """ring_reduce_scatter leaves chunk (r + 1) % p summed over all ranks on rank r, with p - 1 ring messages."""
    _check_phase("ring_reduce_scatter", student, rng, hidden)


@check(points=2)
def ring_all_gather(student, rng, hidden):
    """ring_all_gather spreads each rank's complete chunk (r + 1) % p to every rank, with p - 1 ring messages."""
    _check_phase("ring_all_gather", student, rng, hidden)


@check(points=4)
def ring_all_reduce(student, rng, hidden):
    """ring_all_reduce sums in place on every rank with 2(p - 1) messages to the successor, 2(p - 1)/p·n in all."""
    _check_phase("ring_all_reduce", student, rng, hidden)


@check(points=1)
def ring_all_reduce_nccl(student, rng, hidden):
    """ring_all_reduce gives the same sums over NCCL, on two GPUs."""
    require_gpu(gpus=2, optional=True)  # the gloo checks grade the same code on a CPU: graded where the GPUs are
    cases = _cases(rng, hidden, world_sizes=[2])[2] if hidden else [(8, "float32"), (1001, "float64")]
    _check_world("ring_all_reduce", student, 2, cases, rng, "hidden case" if hidden else "case", backend="nccl")
