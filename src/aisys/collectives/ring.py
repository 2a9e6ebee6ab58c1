"""Ring all-reduce from point-to-point messages: a reduce-scatter, then an all-gather, around a ring of p processes.

Rank r sends only to its successor (r + 1) % p and receives only from its predecessor (r - 1) % p.
The tensor is cut into p chunks (`chunk_bounds`). In step s of the reduce-scatter, rank r sends
chunk (r - s) % p and adds the chunk (r - s - 1) % p it receives into its own; after p - 1 steps
rank r holds chunk (r + 1) % p reduced over all ranks. In step s of the all-gather, rank r sends
chunk (r + 1 - s) % p, now final, and overwrites chunk (r - s) % p with the one it receives.
Each rank sends 2(p - 1) messages of about n/p elements, 2(p - 1)/p of the tensor in all, and no
algorithm can send less per rank (Patarasuk & Yuan, J. Parallel Distrib. Comput. 69(2), 2009).

An empty chunk (n < p) sends no message: sender and receiver both know the chunk is empty.
On two H200s this ring reaches 0.9x the bus bandwidth of NCCL's own all-reduce at 1 GiB
(benchmarks/allreduce.py). A version that cut each chunk into slices, to overlap sending with
adding, was slower there at every size: NCCL's point-to-point bandwidth falls steeply for
messages under ~16 MiB, and the additions it would hide take a tenth of the time of the sends.
"""

import torch
import torch.distributed as dist

from .._validate import positive_int

# The reductions, each as an in-place update of a chunk with the chunk received. gloo has no AVG,
# and AVG of integers has no one right answer: SUM, then divide by the world size, where it is wanted.
_REDUCE = {
    dist.ReduceOp.SUM: lambda chunk, received: chunk.add_(received),
    dist.ReduceOp.PRODUCT: lambda chunk, received: chunk.mul_(received),
    dist.ReduceOp.MIN: lambda chunk, received: torch.minimum(chunk, received, out=chunk),
    dist.ReduceOp.MAX: lambda chunk, received: torch.maximum(chunk, received, out=chunk),
}
SUPPORTED_OPS = ("SUM", "PRODUCT", "MIN", "MAX")



def chunk_bounds(n: int, p: int) -> list[tuple[int, int]]:
    """The p contiguous chunks [start, stop) of n elements: sizes differ by at most 1, the larger first.

    With n = 10 and p = 4: [(0, 3), (3, 6), (6, 8), (8, 10)]. With n < p the last p - n chunks are empty.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    p = positive_int("p", p)
    size, larger = divmod(n, p)
    bounds, start = [], 0
    for c in range(p):
        stop = start + size + (c < larger)
        bounds.append((start, stop))
        start = stop
    return bounds


# ---------------------------------------------------------------------------------------------- checks


def _reduction(op):
    """The in-place update for `op`; ValueError before any message is sent, so that every rank raises it."""
    for supported in _REDUCE:
        if op == supported:  # ReduceOp and its RedOpType compare equal, but do not hash alike
            return _REDUCE[supported]
    raise ValueError(f"op must be one of dist.ReduceOp.{', dist.ReduceOp.'.join(SUPPORTED_OPS)}; got {op!r} "
                     "(for an average, reduce with SUM and divide by the world size)")


def _require_tensor(tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")


def _contiguity_error(rank: int) -> ValueError:
    return ValueError(f"tensor must be contiguous on every rank, and rank {rank}'s is not (a view such as x[::2] "
                      "or x.T): pass x.contiguous() and copy the result back")


_DTYPES = sorted({d for d in vars(torch).values() if isinstance(d, torch.dtype)}, key=str)


def _describe_tensor(tensor) -> torch.Tensor:
    """What every rank must agree on, as int64s: element count, dtype, contiguity."""
    return torch.tensor([tensor.numel(), _DTYPES.index(tensor.dtype), int(tensor.is_contiguous())],
                        dtype=torch.int64, device=tensor.device)


def agree_on_tensor(tensor) -> None:
    """Raise the same ValueError on every rank unless all hold contiguous tensors of one size and dtype.

    Without this exchange, ranks holding different sizes would cut different chunks, wait for
    messages nobody sends, and hang until the timeout. It costs p - 1 messages of three int64s,
    around the same ring as the data (an all-gather of the descriptions).
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    table = torch.zeros(p, 3, dtype=torch.int64, device=tensor.device)
    table[rank] = _describe_tensor(tensor)
    for step in range(p - 1):
        received = torch.empty(3, dtype=torch.int64, device=tensor.device)
        _exchange(table[(rank - step) % p], received)
        table[(rank - step - 1) % p] = received
    numel, dtype, contiguous = (table[:, i].tolist() for i in range(3))
    if not all(contiguous):
        raise _contiguity_error(contiguous.index(0))
    for other in range(1, p):
        if dtype[other] != dtype[0]:
            raise ValueError(f"tensor must have the same dtype on every rank: rank {other} has "
                             f"{_DTYPES[dtype[other]]}, rank 0 has {_DTYPES[dtype[0]]}")
        if numel[other] != numel[0]:
            raise ValueError(f"tensor must have the same number of elements on every rank: rank {other} has "
                             f"{numel[other]}, rank 0 has {numel[0]}")


def _prepare(tensor, op, check_sizes: bool):
    """Validate; return the reduction. Checks that can differ between ranks go through `agree_on_tensor`."""
    _require_tensor(tensor)
    reduce = _reduction(op)
    if check_sizes:
        agree_on_tensor(tensor)
    elif not tensor.is_contiguous():
        raise _contiguity_error(dist.get_rank())
    return reduce


# ---------------------------------------------------------------------------------------------- the ring


def _exchange(send: torch.Tensor, receive: torch.Tensor) -> None:
    """Send to the successor while receiving from the predecessor, both posted before waiting on either.

    Every rank sends in the same step. With a blocking dist.send first, each rank would wait for
    its successor to receive while the successor waits for its own successor: a cycle, which
    deadlocks as soon as a message exceeds what the transport buffers (and over NCCL at once).
    batch_isend_irecv posts both at once; over NCCL it is the one form that cannot deadlock.
    """
    for work in post_exchange(send, receive):
        work.wait()


def post_exchange(send: torch.Tensor, receive: torch.Tensor, group=None) -> list:
    """Post `_exchange`'s send and receive in one batch on `group` (None: the default group); the works, not waited
    on. An empty tensor posts nothing: both ends know its size."""
    rank, p = dist.get_rank(), dist.get_world_size()
    operations = []
    if send.numel():
        operations.append(dist.P2POp(dist.isend, send, (rank + 1) % p, group))
    if receive.numel():
        operations.append(dist.P2POp(dist.irecv, receive, (rank - 1) % p, group))
    return dist.batch_isend_irecv(operations) if operations else []


def _chunk(tensor: torch.Tensor, bounds, c: int) -> torch.Tensor:
    start, stop = bounds[c % len(bounds)]
    return tensor[start:stop]


def reduce_scatter_steps(tensor: torch.Tensor, reduce, on_step=None) -> None:
    """The p - 1 reduce-scatter steps on a flat, validated tensor (see the module's docstring)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    bounds = chunk_bounds(tensor.numel(), p)
    received = torch.empty(max(stop - start for start, stop in bounds), dtype=tensor.dtype, device=tensor.device)
    for step in range(p - 1):
        mine = _chunk(tensor, bounds, rank - step - 1)
        _exchange(_chunk(tensor, bounds, rank - step), received[:mine.numel()])
        reduce(mine, received[:mine.numel()])
        if on_step:
            on_step("reduce-scatter", step)


def all_gather_steps(tensor: torch.Tensor, on_step=None) -> None:
    """The p - 1 all-gather steps, from the layout the reduce-scatter leaves: chunk (r + 1) % p final on rank r."""
    rank, p = dist.get_rank(), dist.get_world_size()
    bounds = chunk_bounds(tensor.numel(), p)
    for step in range(p - 1):
        _exchange(_chunk(tensor, bounds, rank + 1 - step), _chunk(tensor, bounds, rank - step))
        if on_step:
            on_step("all-gather", step)


def reduce_scatter(tensor: torch.Tensor, op=dist.ReduceOp.SUM, *, check_sizes: bool = True) -> torch.Tensor:
    """Reduce `tensor` across the ranks, in place, leaving on rank r only chunk (r + 1) % p final.

    The other chunks hold partial results. `check_sizes` first makes sure every rank holds a
    tensor of the same size and dtype (p - 1 tiny messages; see `agree_on_tensor`). Returns `tensor`.
    """
    reduce = _prepare(tensor, op, check_sizes)
    reduce_scatter_steps(tensor.view(-1), reduce)
    return tensor


def all_gather(tensor: torch.Tensor, *, check_sizes: bool = True) -> torch.Tensor:
    """Complete, in place, the tensor that `reduce_scatter` left: every rank ends with every chunk. Returns it."""
    _prepare(tensor, dist.ReduceOp.SUM, check_sizes)
    all_gather_steps(tensor.view(-1))
    return tensor


def all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM, *, check_sizes: bool = True, on_step=None) -> torch.Tensor:
    """Reduce `tensor` over all ranks, in place, with 2(p - 1) messages to the ring successor; returns it.

    `op` is dist.ReduceOp SUM, PRODUCT, MIN or MAX. `check_sizes=False` skips the agreement on
    size and dtype (the bare algorithm, as a benchmark measures it; mismatched ranks then hang
    until the process group's timeout). `on_step(phase, step)`, if given, is called after each step.
    """
    reduce = _prepare(tensor, op, check_sizes)
    flat = tensor.view(-1)
    reduce_scatter_steps(flat, reduce, on_step)
    all_gather_steps(flat, on_step)
    return tensor
