"""The eight collective primitives on simulated ranks: a list of p numpy arrays in, the list each rank holds after, out.

Rank r's buffer is `buffers[r]`. Every function is pure (it returns new arrays and never
changes its input) and follows torch.distributed's semantics, buffer by buffer:

| here                        | torch.distributed                          | rank r holds after                 |
|-----------------------------|--------------------------------------------|------------------------------------|
| broadcast(buffers, root)    | broadcast(t, src=root)                     | root's buffer                      |
| scatter(buffers, root)      | scatter(out, chunks of root's t, src=root) | block r of root's buffer           |
| gather(buffers, root)       | gather(t, gather_list, dst=root)           | root: every buffer, in rank order  |
| reduce(buffers, root, op)   | reduce(t, dst=root, op)                    | root: op over every buffer         |
| all_reduce(buffers, op)     | all_reduce(t, op)                          | op over every buffer               |
| all_gather(buffers)         | all_gather_into_tensor(out, t)             | every buffer, in rank order        |
| reduce_scatter(buffers, op) | reduce_scatter_tensor(out, t, op)          | block r of op over every buffer    |
| all_to_all(buffers)         | all_to_all_single(out, t)                  | block r of every buffer, in order  |

A block is one of p equal parts of a buffer along its first axis ("chunk" in torch); the
gathered results are concatenated along that axis, as the `_into_tensor` forms give them.
Ranks that receive nothing (every rank but the root in gather and reduce) keep their buffer
as it was. torch.distributed leaves their buffer undefined after `reduce` (gloo leaves
partial sums in it); the simulated version keeps it unchanged, as NCCL does.

Reductions combine the buffers in rank order in the buffers' dtype: integers wrap around
as they do in torch. The ops are torch.distributed.ReduceOp's names in lower case.
`naive_traffic` counts the bytes each rank sends and receives when every piece of data
goes straight from the rank that has it to the rank that needs it, reductions done by the
receiver: the parameter-server form the bandwidth-optimal algorithms improve on.
"""

from dataclasses import dataclass
from functools import reduce as fold
from numbers import Integral

import numpy as np

from .._validate import nonnegative_number, one_of, positive_int

OPS = {"sum": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum}
COLLECTIVES = ("broadcast", "scatter", "gather", "reduce", "all_reduce", "all_gather", "reduce_scatter",
               "all_to_all")


def broadcast(buffers, root: int) -> list[np.ndarray]:
    """Every rank gets a copy of the root's buffer."""
    buffers = _buffers(buffers)
    root = _root(root, len(buffers))
    return [buffers[root].copy() for _ in buffers]


def scatter(buffers, root: int) -> list[np.ndarray]:
    """Rank r gets block r of the root's buffer; the other ranks' buffers are not read."""
    buffers = _buffers(buffers, split=True)
    root = _root(root, len(buffers))
    return _blocks(buffers[root], len(buffers))


def gather(buffers, root: int) -> list[np.ndarray]:
    """The root gets every rank's buffer, concatenated in rank order; the others keep theirs."""
    buffers = _buffers(buffers)
    root = _root(root, len(buffers))
    return [np.concatenate(buffers) if rank == root else buffer.copy() for rank, buffer in enumerate(buffers)]


def reduce(buffers, root: int, op: str = "sum") -> list[np.ndarray]:
    """The root gets `op` applied elementwise across every rank's buffer; the others keep theirs."""
    buffers = _buffers(buffers)
    root, op = _root(root, len(buffers)), _op(op)
    return [_combine(buffers, op) if rank == root else buffer.copy() for rank, buffer in enumerate(buffers)]


def all_reduce(buffers, op: str = "sum") -> list[np.ndarray]:
    """Every rank gets `op` applied elementwise across every rank's buffer."""
    buffers = _buffers(buffers)
    result = _combine(buffers, _op(op))
    return [result.copy() for _ in buffers]


def all_gather(buffers) -> list[np.ndarray]:
    """Every rank gets every rank's buffer, concatenated in rank order."""
    buffers = _buffers(buffers)
    result = np.concatenate(buffers)
    return [result.copy() for _ in buffers]


def reduce_scatter(buffers, op: str = "sum") -> list[np.ndarray]:
    """Rank r gets block r of the elementwise `op` across every rank's buffer."""
    buffers = _buffers(buffers, split=True)
    return _blocks(_combine(buffers, _op(op)), len(buffers))


def all_to_all(buffers) -> list[np.ndarray]:
    """Rank r's block j goes to rank j, where it becomes block r: a transpose of (rank, block)."""
    buffers = _buffers(buffers, split=True)
    blocks = [_blocks(buffer, len(buffers)) for buffer in buffers]  # blocks[source][destination]
    return [np.concatenate([blocks[source][rank] for source in range(len(buffers))]) for rank in range(len(buffers))]


@dataclass(frozen=True)
class Traffic:
    """Bytes each rank sends and receives, by rank; `a + b` is a then b."""

    sent: tuple[float, ...]
    received: tuple[float, ...]

    def __add__(self, other: "Traffic") -> "Traffic":
        if len(self.sent) != len(other.sent):
            raise ValueError(f"cannot add the traffic of {len(self.sent)} ranks to that of {len(other.sent)}")
        return Traffic(tuple(a + b for a, b in zip(self.sent, other.sent)),
                       tuple(a + b for a, b in zip(self.received, other.received)))

    @property
    def busiest(self) -> float:
        """The most bytes any rank moves in one direction: what its link must carry."""
        return max(self.sent + self.received)


def naive_traffic(collective: str, world_size: int, nbytes: float, root: int = 0) -> Traffic:
    """Bytes in and out of each rank when `collective` sends every piece straight to where it is needed.

    `nbytes` is the size of one rank's input buffer (for all_gather and gather, the block it
    contributes). all_reduce is counted as reduce to `root` then broadcast from it, the
    parameter server; `root` is ignored by the collectives that have none.
    """
    collective = one_of("collective", collective, COLLECTIVES)
    p, n = positive_int("world_size", world_size), nonnegative_number("nbytes", nbytes)
    root = _root(root, p)
    if collective == "all_reduce":
        return naive_traffic("reduce", p, n, root) + naive_traffic("broadcast", p, n, root)
    if collective in ("broadcast", "scatter", "gather", "reduce"):
        each = n / p if collective == "scatter" else n  # scatter hands each rank one block, not the buffer
        at_root = tuple((p - 1) * each if rank == root else 0.0 for rank in range(p))  # the root's link: all of it
        at_others = tuple(0.0 if rank == root else each for rank in range(p))
        if collective in ("broadcast", "scatter"):
            return Traffic(sent=at_root, received=at_others)
        return Traffic(sent=at_others, received=at_root)
    # all_gather: the whole (one-block) buffer to every other rank; reduce_scatter and all_to_all:
    # block j to rank j, keeping its own block.
    each = (p - 1) * (n if collective == "all_gather" else n / p)
    return Traffic((each,) * p, (each,) * p)


def _buffers(buffers, split: bool = False) -> list[np.ndarray]:
    """The buffers as a list of arrays of one shape and dtype; with `split`, of a length p divides."""
    if not isinstance(buffers, (list, tuple)) or not buffers:
        raise TypeError(f"buffers must be a non-empty list of numpy arrays, one per rank; got {_what(buffers)}")
    for rank, buffer in enumerate(buffers):
        if not isinstance(buffer, np.ndarray):
            raise TypeError(f"buffers[{rank}] must be a numpy array, got {_what(buffer)}")
        if buffer.ndim == 0 or buffer.dtype.kind not in "biuf":
            raise ValueError(f"buffers[{rank}] must be an array of numbers with at least one axis, "
                             f"got shape {buffer.shape} and dtype {buffer.dtype}")
    first = buffers[0]
    for rank, buffer in enumerate(buffers):
        if buffer.shape != first.shape or buffer.dtype != first.dtype:
            raise ValueError(f"buffers must all have one shape and dtype, as the ranks of a collective do: buffers[0] "
                             f"is {first.shape} {first.dtype}, buffers[{rank}] is {buffer.shape} {buffer.dtype}")
    p = len(buffers)
    if split and first.shape[0] % p:
        raise ValueError(f"buffers must split into {p} equal blocks (one per rank) along their first axis, "
                         f"but it has length {first.shape[0]}, which {p} does not divide")
    return list(buffers)


def _root(root, world_size: int) -> int:
    if isinstance(root, bool) or not isinstance(root, Integral) or not 0 <= root < world_size:
        raise ValueError(f"root must be a rank from 0 to {world_size - 1} (world size {world_size}), got {root!r}")
    return int(root)


def _op(op) -> np.ufunc:
    return OPS[one_of("op", op, tuple(OPS))]


def _combine(buffers: list[np.ndarray], op: np.ufunc) -> np.ndarray:
    """op over the buffers in rank order, in their dtype (np.sum would widen small integers)."""
    return fold(lambda total, buffer: op(total, buffer, dtype=buffer.dtype), buffers[1:], buffers[0].copy())


def _blocks(buffer: np.ndarray, p: int) -> list[np.ndarray]:
    return [block.copy() for block in np.split(buffer, p)]


def _what(value) -> str:
    return f"{type(value).__name__} {value!r}"[:80]
