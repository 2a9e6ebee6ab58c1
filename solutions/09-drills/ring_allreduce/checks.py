"""Checks: a ring all-reduce on 2 and 3 real processes, its values on every rank and its messages.

All cases of one world size run in one `call_ranks` (each call starts p processes: the visible
cases are one call on 3 ranks, the hidden ones one on 3 and one on 2). Every rank's tensor is
compared with the grader's sum of the inputs: int64 exactly, on values beyond 2**53 that a float
accumulator rounds; floats within 2 p eps sum|x|, the error of any order of p - 1 additions. The
inputs differ on every rank. The recorded messages must follow the ring: to (r + 1) % p only, from
(r - 1) % p only, at most 2(p - 1) of at most ceil(n / p) elements each, 2(p - 1) n elements in all
over the ranks; a collective raises where the messages are recorded. A property check would start
processes for every example: the lengths are chosen instead (0, 1, fewer than p, not a multiple of
p, a prime, thousands).
"""

import numpy as np

from aisys.collectives import ring

from aisys_grader.checks import case_on_ranks, check
from aisys_grader.compare import CheckFailure, raised, unredacted

EPSILON = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}
VISIBLE = {3: [(10, "float32"), (7, "int64")]}  # p: [(n, dtype)]


def _hidden(rng) -> dict[int, list[tuple[int, str]]]:
    """3 ranks first (where a wrong chunk order shows), then 2; every dtype on each."""
    ragged = int(rng.integers(4, 400))
    ragged += ragged % 3 == 0  # not a multiple of 3
    prime = int(rng.choice([13, 31, 97, 101, 211]))
    return {3: [(0, "float32"), (1, "float64"), (2, "int64"), (ragged, "int64"), (prime, "float32"),
                (int(rng.integers(2000, 4000)), "float64")],
            2: [(1, "int64"), (2 * int(rng.integers(2, 200)) + 1, "float32"),
                (int(rng.integers(2000, 4000)), "float64")]}


def _inputs(rng, p: int, n: int, dtype: str) -> list[np.ndarray]:
    """One array per rank: floats in [-100, 100); integers beyond 2**53, below 2**60 so that the sum fits."""
    if dtype == "int64":
        return [rng.integers(-2**60, 2**60, n, dtype=np.int64) for _ in range(p)]
    return [rng.uniform(-100, 100, n).astype(dtype) for _ in range(p)]


def _check_values(got, inputs: list[np.ndarray], rank: int) -> None:
    expected = np.sum([x.astype(np.int64 if x.dtype.kind == "i" else np.float64) for x in inputs], axis=0)
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        raise CheckFailure(f"rank {rank}'s tensor could not be read back after the call")
    if got.dtype.kind == "i":
        good = got == expected
    else:
        bound = 2 * len(inputs) * EPSILON[str(got.dtype)] * np.sum([np.abs(x.astype(np.float64)) for x in inputs],
                                                                  axis=0)
        good = np.abs(got.astype(np.float64) - expected) <= bound + 1e-30
    if good.all():
        return
    index = int(np.flatnonzero(~good)[0])
    chunk = next(c for c, (start, stop) in enumerate(ring.chunk_bounds(got.size, len(inputs))) if start <= index < stop)
    own = got[index] == inputs[rank][index]
    raise CheckFailure(
        f"rank {rank}: {int((~good).sum())} of {good.size} elements are not the sum over all ranks; the first, element "
        f"{index}{unredacted(f' (expected {expected[index]}, got {got[index]})')}, is in chunk {chunk}"
        + (": it still holds the rank's own input, so nothing arrived there. Is every element in a chunk (the first "
           "n % p chunks take one more)? Does the all-gather run p - 1 steps?"
           if own else ": was a chunk sent before it was complete, added twice, or added into the wrong chunk? In "
           "reduce-scatter step s rank r sends chunk (r - s) % p and adds what it receives into chunk (r - s - 1) % p; "
           "in all-gather step s it sends chunk (r + 1 - s) % p and receives chunk (r - s) % p. Chunk c holds n // p "
           "elements, plus one for each of the first n % p chunks."))


def _check_traffic(messages: list[dict], rank: int, p: int, n: int) -> int:
    """CheckFailure unless this rank's messages follow the ring; the elements it sent."""
    successor, predecessor = (rank + 1) % p, (rank - 1) % p
    sent = [m for m in messages if m["kind"] == "send"]
    strays = sorted({m["peer"] for m in sent if m["peer"] != successor})
    if strays:
        raise CheckFailure(f"rank {rank} sent to rank(s) {', '.join(map(str, strays))}; its ring successor is "
                           f"{successor}: a ring sends only to (r + 1) % p")
    strays = sorted({m["peer"] for m in messages if m["kind"] == "recv" and m["peer"] != predecessor})
    if strays:
        raise CheckFailure(f"rank {rank} received from rank(s) {', '.join(map(str, strays))}; its ring predecessor is "
                           f"{predecessor}: a ring receives only from (r - 1) % p")
    largest_chunk, steps = -(-n // p), 2 * (p - 1)
    biggest = max((m["numel"] for m in sent), default=0)
    if biggest > largest_chunk:
        raise CheckFailure(f"rank {rank} sent a message of {biggest} elements; the largest chunk has {largest_chunk}: "
                           "send one chunk per step, not the whole tensor")
    if len(sent) > steps:
        raise CheckFailure(f"rank {rank} sent {len(sent)} messages; a ring all-reduce sends one chunk in each of its "
                           f"2(p - 1) = {steps} steps")
    return sum(m["numel"] for m in sent)


def _error_text(p: int, rank: int, error: str) -> str:
    if error.startswith("CollectiveNotAllowed"):
        return ("it called a torch.distributed collective: the drill is to build the all-reduce from sends and "
                "receives to the ring's neighbours")
    if "timed out" in error.lower():
        return (f"rank {rank} raised {raised(error)}: a receive waited for a message nobody sent, or a blocking "
                "dist.send waited for a receive nobody posted (every rank sending first deadlocks: post the send and "
                "the receive together with dist.batch_isend_irecv, then wait on both)")
    return f"rank {rank} raised {raised(error)}"


def _world(student, rng, p: int, cases: list[tuple[int, str]], label: str) -> None:
    """Every case of one world size in one call_ranks; the values and messages of each, on every rank."""
    inputs = [_inputs(rng, p, n, dtype) for n, dtype in cases]
    try:
        outcomes = student.call_ranks("ring_all_reduce", [[[x] for x in case] for case in inputs], world_size=p)
    except CheckFailure as failure:
        raise CheckFailure(f"{label}s on {p} ranks: {failure}") from None
    for i, ((n, dtype), given) in enumerate(zip(cases, inputs)):
        where = f"{label} {i + 1} of {len(cases)} on {p} ranks, a tensor of {n} {dtype}"
        ranks = case_on_ranks(outcomes, i, where, lambda rank, error: _error_text(p, rank, error))
        try:
            total = 0
            for rank, outcome in enumerate(ranks):
                total += _check_traffic(outcome.get("messages") or [], rank, p, n)
                _check_values((outcome.get("tensors") or [None])[0], given, rank)
            if total != 2 * (p - 1) * n:
                raise CheckFailure(f"the ranks sent {total} elements in all; a ring all-reduce sends 2(p - 1) n = "
                                   f"{2 * (p - 1) * n} (each of its steps moves every chunk once)")
        except CheckFailure as failure:
            raise CheckFailure(f"{where}: {failure}") from None


@check(points=4)
def ring_all_reduce(student, rng, hidden):
    """ring_all_reduce sums in place on every rank, with at most 2(p - 1) chunk-sized messages to the successor."""
    for p, cases in (_hidden(rng) if hidden else VISIBLE).items():
        _world(student, rng, p, cases, "hidden case" if hidden else "case")
