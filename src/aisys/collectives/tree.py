"""All-reduce in O(log p) rounds: recursive doubling, binomial tree, recursive halving-doubling, and a choice by size.

Each function runs inside one rank of a torch.distributed process group (see
`aisys.collectives.launch.run_ranks`), reduces `tensor` in place across all ranks with
point-to-point messages only (`dist.isend` / `dist.irecv`), and returns it. The α-β costs
are those of Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH" (IJHPCA 2005), with α the latency of one message and β the seconds
per byte of one link in one direction; the time of the reduction arithmetic is left out.

Non-power-of-two world sizes are handled as in that paper (section 4): with p' the largest
power of two <= p, the first 2(p - p') ranks pair up, each even one sends its data to the odd
one above it and sits out; the p' survivors run the power-of-two algorithm; then each
survivor of a pair sends the result back to the rank that sat out.
"""

import torch
import torch.distributed as dist

from .._validate import one_of, positive_int

# dist.ReduceOp, as aisys.collectives.ring takes it; names for messages and for the agreement between ranks.
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN}
ALGORITHMS = ("ring", "recursive_doubling", "halving_doubling", "tree")
# The dtypes a rank may pass; the index is what ranks exchange to agree on it.
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# --------------------------------------------------------------------------------------- the algorithms


def recursive_doubling_all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """In log2 p rounds, rank r exchanges its whole tensor with r XOR 2^k and combines: every rank ends with the
    result."""
    return _run(tensor, op, _recursive_doubling)


def halving_doubling_all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """Rabenseifner: a reduce-scatter by recursive halving, then an all-gather by recursive doubling."""
    return _run(tensor, op, _halving_doubling)


def tree_all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM, chunks: int = 1) -> torch.Tensor:
    """A binomial-tree reduce to rank 0, then a binomial-tree broadcast from it, each in ceil(log2 p) rounds.

    With `chunks` > 1 the tensor travels in that many pieces and a rank forwards a piece as soon
    as it has it, so that the levels of the tree work at the same time (a pipeline).
    """
    chunks = positive_int("chunks", chunks)
    return _run(tensor, op, lambda flat, group, combine: _binomial_tree(flat, group, combine, chunks), fold=False)


def all_reduce(tensor: torch.Tensor, algorithm: str = "auto", op=dist.ReduceOp.SUM, *, alpha: float | None = None,
               beta: float | None = None) -> torch.Tensor:
    """All-reduce with the named algorithm, or with "auto" the one `choose_algorithm` predicts fastest for its size.

    "auto" needs `alpha` (seconds per message) and `beta` (seconds per byte); every rank must pass the same.
    """
    algorithm = one_of("algorithm", algorithm, ("auto", *ALGORITHMS))
    if algorithm == "auto":
        if alpha is None or beta is None:
            raise ValueError("algorithm 'auto' needs alpha (seconds per message) and beta (seconds per byte)")
        _check_tensor(tensor)
        algorithm = choose_algorithm(tensor.numel() * tensor.element_size(), dist.get_world_size(), alpha, beta)
    if algorithm == "ring":
        from . import ring  # helper module of another page; imported only when used

        return ring.all_reduce(tensor, op=op)
    return {"recursive_doubling": recursive_doubling_all_reduce, "halving_doubling": halving_doubling_all_reduce,
            "tree": tree_all_reduce}[algorithm](tensor, op=op)


# --------------------------------------------------------------------------------------- the rounds
# Each takes the flat tensor, `group` (the global ranks taking part; a rank's position in it is its
# rank within the algorithm) and `combine(into, other)`. Only the tree accepts any size of group.


def _recursive_doubling(flat: torch.Tensor, group: list[int], combine) -> None:
    me, received = group.index(dist.get_rank()), torch.empty_like(flat)
    distance = 1
    while distance < len(group):
        _exchange(flat, received, group[me ^ distance])
        combine(flat, received)
        distance *= 2


def _halving_doubling(flat: torch.Tensor, group: list[int], combine) -> None:
    me, received = group.index(dist.get_rank()), torch.empty_like(flat)
    # Reduce-scatter: each round halves the span [lo, hi) this rank is responsible for. The partner
    # (r XOR 2^k) has the same span and keeps the other half, so each sends the half it gives up.
    lo, hi, spans = 0, flat.numel(), []
    distance = 1
    while distance < len(group):
        spans.append((lo, hi))
        middle = lo + (hi - lo) // 2
        keep, give = ((lo, middle), (middle, hi)) if me & distance == 0 else ((middle, hi), (lo, middle))
        _exchange(flat[give[0]:give[1]], received[keep[0]:keep[1]], group[me ^ distance])
        combine(flat[keep[0]:keep[1]], received[keep[0]:keep[1]])
        lo, hi = keep
        distance *= 2
    # All-gather: the same partners in reverse order; each round doubles the finished span.
    while spans:
        distance //= 2
        outer_lo, outer_hi = spans.pop()
        other = (outer_lo, lo) if lo > outer_lo else (hi, outer_hi)
        _exchange(flat[lo:hi], flat[other[0]:other[1]], group[me ^ distance])
        lo, hi = outer_lo, outer_hi


def _binomial_tree(flat: torch.Tensor, group: list[int], combine, chunks: int) -> None:
    me, p = group.index(dist.get_rank()), len(group)
    # In round k a rank whose lowest set bit is 2^k sends to me - 2^k; one whose bits below 2^(k+1)
    # are all 0 receives from me + 2^k. So rank 0 receives ceil(log2 p) times, and each other rank
    # sends exactly once, to its parent.
    parent = me - (me & -me) if me else None
    children = [me + d for d in _powers_of_two_below(p) if (me == 0 or d < (me & -me)) and me + d < p]
    pieces, sends = flat.tensor_split(min(chunks, max(flat.numel(), 1))), []
    received = torch.empty_like(pieces[0])
    for piece in pieces:  # reduce towards rank 0, children in round order
        for child in children:
            dist.recv(received[:piece.numel()], group[child])
            combine(piece, received[:piece.numel()])
        if parent is not None:
            sends.append(dist.isend(piece, group[parent]))  # not waited: the next piece can come in meanwhile
    _wait(sends)  # a piece must be sent before the broadcast overwrites it
    sends = []
    for piece in pieces:  # broadcast from rank 0, children in the reverse order: the farthest subtree first
        if parent is not None:
            dist.recv(piece, group[parent])
        sends += [dist.isend(piece, group[child]) for child in reversed(children)]
    _wait(sends)


def _powers_of_two_below(p: int) -> list[int]:
    return [1 << k for k in range(max(p - 1, 0).bit_length())]


def _exchange(send: torch.Tensor, into: torch.Tensor, peer: int) -> None:
    """Send one buffer to `peer` while receiving another from it: both posted at once, as over NCCL they must be
    (two ranks each blocked in a send to the other never reach their receives)."""
    _wait(dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, into, peer)]))


def _wait(works) -> None:
    for work in works:
        work.wait()


# --------------------------------------------------------------------------------------- the fold


def _run(tensor: torch.Tensor, op: str, algorithm, fold: bool = True) -> torch.Tensor:
    """Validate on every rank, then run `algorithm` on the flat tensor, folding the ranks to a power of two."""
    op = _op_name(op)
    _check_tensor(tensor)
    _agree_across_ranks(tensor, op)
    flat, combine = tensor.view(-1), _COMBINE[op]
    if flat.numel() == 0 or dist.get_world_size() == 1:
        return tensor
    if not fold:
        algorithm(flat, list(range(dist.get_world_size())), combine)
        return tensor
    rank, p = dist.get_rank(), dist.get_world_size()
    extra = p - (1 << (p.bit_length() - 1))  # ranks beyond the largest power of two p'
    if rank < 2 * extra and rank % 2 == 0:  # sits out: hands its data to rank + 1 and waits for the result
        dist.send(flat, rank + 1)
        dist.recv(flat, rank + 1)
        return tensor
    if rank < 2 * extra:
        received = torch.empty_like(flat)
        dist.recv(received, rank - 1)
        combine(flat, received)
    survivors = [r for r in range(p) if r >= 2 * extra or r % 2 == 1]
    algorithm(flat, survivors, combine)
    if rank < 2 * extra:
        dist.send(flat, rank - 1)
    return tensor


def _sum(into, other):
    into.add_(other)


def _product(into, other):
    into.mul_(other)


def _max(into, other):
    torch.maximum(into, other, out=into)


def _min(into, other):
    torch.minimum(into, other, out=into)


_COMBINE = {"SUM": _sum, "PRODUCT": _product, "MAX": _max, "MIN": _min}


def _op_name(op) -> str:
    for name, reduce_op in OPS.items():
        if op == reduce_op:  # ReduceOp and its RedOpType compare equal but do not hash alike: no dict lookup
            return name
    raise ValueError(f"op must be one of dist.ReduceOp.{', dist.ReduceOp.'.join(OPS)}; got {op!r}")


def _check_tensor(tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in DTYPES)
        raise TypeError(f"tensor must have one of the dtypes {names}; got {str(tensor.dtype).removeprefix('torch.')}")
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous: the reduction runs in place on its flat view "
                         "(pass tensor.contiguous() and copy the result back)")


def _agree_across_ranks(tensor: torch.Tensor, op: str) -> None:
    """Raise the same ValueError on every rank when the ranks disagree on size, dtype or op.

    Without this a rank with a different size posts receives of another length, and the ranks
    hang or fail in ways that do not say why. It costs one small all_gather (not point-to-point,
    and not part of the algorithms' traffic: `traffic.record(allow_collectives=True)` lists it).
    """
    mine = torch.tensor([tensor.numel(), DTYPES.index(tensor.dtype), list(OPS).index(op)], dtype=torch.int64,
                        device=tensor.device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    everyone = [row.tolist() for row in everyone]
    for what, column, names in (("number of elements", 0, None), ("dtype", 1, DTYPES), ("op", 2, list(OPS))):
        values = [row[column] for row in everyone]
        if len(set(values)) > 1:
            shown = [str(names[v]).removeprefix("torch.") if names else v for v in values]
            raise ValueError(f"tensor must have the same {what} on every rank; by rank: {shown}" if what != "op" else
                             f"op must be the same on every rank; by rank: {shown}")


def recursive_doubling_peers(rank: int, world_size: int) -> tuple[list[int], list[int]]:
    """The ranks that `rank` sends to and receives from, in order, in recursive doubling with the fold.

    Each message carries the whole tensor: a rank that sits out sends once and receives once;
    one that takes its place receives, then runs log2 p' rounds, then sends; the others run the rounds.
    """
    p = positive_int("world_size", world_size)
    if not (isinstance(rank, int) and 0 <= rank < p):
        raise ValueError(f"rank must be an integer in [0, {p}), got {rank!r}")
    p2 = 1 << (p.bit_length() - 1)
    extra = p - p2
    if rank < 2 * extra and rank % 2 == 0:
        return [rank + 1], [rank + 1]
    survivors = [r for r in range(p) if r >= 2 * extra or r % 2 == 1]
    me = survivors.index(rank)
    rounds = [survivors[me ^ (1 << k)] for k in range(p2.bit_length() - 1)]
    if rank < 2 * extra:
        return rounds + [rank - 1], [rank - 1] + rounds
    return rounds, list(rounds)


# --------------------------------------------------------------------------------------- the costs


def choose_algorithm(nbytes: float, world_size: int, alpha: float, beta: float,
                     candidates: tuple[str, ...] = ALGORITHMS) -> str:
    """The candidate with the lowest predicted all-reduce time (`aisys.collectives.cost`); a tie goes to the first
    listed.

    Ring against recursive doubling, the two cross where lg p (α + nβ) = 2(p-1) α + 2(p-1)/p nβ
    (⌊lg p⌋ + 2 steps for recursive doubling when p is not a power of two), at
    n* = (2(p-1) - lg p) α / ((lg p - 2(p-1)/p) β): `cost.crossover("all_reduce", "ring", "recursive_doubling", ...)`.
    """
    if not candidates or isinstance(candidates, str):
        raise ValueError(f"candidates must be a non-empty tuple of names from {ALGORITHMS}, got {candidates!r}")
    from . import cost  # here, not at the top: the alpha_beta exercise hides cost but runs these algorithms

    times = [cost.time("all_reduce", a, nbytes, world_size, alpha, beta) for a in candidates]
    return candidates[times.index(min(times))]
