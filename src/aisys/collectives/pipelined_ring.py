"""The ring all-reduce of `ring.py`, tuned: each chunk cut into slices whose additions overlap the next slices'
transfers, and the slices spread over several communicators ("channels") that transfer at the same time.

The messages are those of `ring.all_reduce`, step for step: rank r sends chunk (r - s) % p of the
reduce-scatter's step s, in `slices` pieces instead of one. What changes is the order in which the host
posts them. `ring.py` posts step s + 1 after the addition of step s, so the link idles while the GPU adds,
and the addition waits for the whole chunk. Here slice j of step s + 1 is posted as soon as slice j of
step s has been added, the additions of later slices still to come:

    link:  send s,0 | send s,1 | send s,2 | send s+1,0 | send s+1,1 | ...
    adds:             add  s,0 | add  s,1 | add   s,2  | add  s+1,0 | ...

so only the last slice's addition is exposed, at the end of the reduce-scatter. This works because a
process group runs its messages on a stream of its own, which waits, at each post, for what the host had
queued on the compute stream so far (ProcessGroupNCCL's stream synchronisation): posting slice j after
adding slice j orders exactly that dependency and no other.

Channels. NCCL runs one send/receive between two ranks on a few of its channels (thread blocks, each
copying part of the message), and the fewer the larger the communicator: it gives an operation its
communicator's p2p channels divided by the number of ranks (`scheduleP2pTasksToPlan` in NCCL's enqueue.cc), as
if every rank talked to every other at once, though a ring talks to two. A slice posted on another communicator
runs on that communicator's stream, at the same time, on channels of its own. `ring_channels(count)` makes the
communicators: for each channel, one per edge of the ring, joining just the two ranks of that edge (a
communicator of two ranks gives an operation twice the channels of one of four), so that rank r sends on the
edge (r, r + 1) and receives on the edge (r - 1, r). Slice j travels on channel j % count. NCCL's own all-reduce
does the same inside one kernel: its ring runs on every channel at once.

Each slice receives into a slot of its own (slices of successive steps differ by an element where chunk
sizes differ), so that a slice still waiting for its addition is never overwritten by the next step's.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .._validate import positive_int
from .ring import _chunk, _prepare, chunk_bounds

SLICE_BYTES = 16 * 2**20  # slices no smaller than this, beyond one per channel: each message costs a launch
MAX_SLICES = 16
CHANNELS = 8  # what the captured ring uses by default: the best of 1 to 8 on 2 and 4 H200s (benchmarks/allreduce.py)


def default_slices(nbytes: int, p: int, channels: int = 1) -> int:
    """Slices per chunk of a tensor of `nbytes` on p ranks: one per channel at least, more for chunks of more than
    `channels` x SLICE_BYTES, at most MAX_SLICES. On 4 H200s: 8 slices over 8 channels at 64 MiB and 256 MiB,
    16 at 1 GiB, each the best of 1, 4, 8 and 16."""
    chunk = nbytes // positive_int("p", p)
    return max(positive_int("channels", channels), min(MAX_SLICES, chunk // SLICE_BYTES))


@dataclass(frozen=True)
class Channel:
    """The process groups one channel sends on (to the successor) and receives on (from the predecessor)."""

    send: object
    receive: object


def ring_channels(count: int = CHANNELS, *, pairwise: bool = True) -> list[Channel]:
    """`count` channels of communicators for the ring. Every rank must call it, at the same point.

    pairwise (with p > 2): each edge (e, e + 1) of each channel gets a process group of its two ranks; otherwise
    (and with p = 2, where the one pair is both edges) each channel is one group of all ranks. Creating a group is
    collective over the world, so every rank creates every group, in one order, and keeps those it belongs to
    (torch.distributed.new_group's rule). A communicator is set up by its first operation, which waits for every
    member: the first operations on the edges go in order of edge, so that no rank waits for one that waits in turn
    on it (rank r would set up (r, r + 1) while r + 1 sets up (r + 1, r + 2), around the ring: a deadlock)."""
    count = positive_int("count", count)
    rank, p = dist.get_rank(), dist.get_world_size()
    channels = []
    for _ in range(count):
        if p <= 2 or not pairwise:
            group = dist.new_group(list(range(p)))
            channels.append(Channel(group, group))
            continue
        edges = [dist.new_group(sorted({e, (e + 1) % p})) for e in range(p)]
        for e in (e for e in range(p) if rank in (e, (e + 1) % p)):
            dist.barrier(group=edges[e])  # sets up this edge's communicator, in the one order every rank follows
        channels.append(Channel(send=edges[rank], receive=edges[(rank - 1) % p]))
    return channels


def all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM, *, slices: int | None = None,
               channels: list[Channel] | None = None, check_sizes: bool = True) -> torch.Tensor:
    """Reduce `tensor` over all ranks in place with the ring's messages, pipelined by slices; returns it.

    `slices`: pieces per chunk (default `default_slices`). `channels`: from `ring_channels`,
    to spread the slices over (default: the default group alone, as `ring.py` posts). op and check_sizes as in
    `ring.all_reduce`."""
    reduce = _prepare(tensor, op, check_sizes)
    rank, p = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    if p == 1 or flat.numel() == 0:
        return tensor
    channels = list(channels) if channels else [Channel(None, None)]
    nbytes = flat.numel() * flat.element_size()
    slices = default_slices(nbytes, p, len(channels)) if slices is None else positive_int("slices", slices)
    bounds = chunk_bounds(flat.numel(), p)
    slots = torch.empty(slices, -(-(bounds[0][1] - bounds[0][0]) // slices), dtype=flat.dtype, device=flat.device)

    def pieces(c):
        return _pieces(_chunk(flat, bounds, c), slices)

    def post(j, send, receive):
        return _post(send, receive, rank, p, channels[j % len(channels)])

    # reduce-scatter: slice j of step s + 1 is posted once slice j of step s is added
    # (a received piece has the length of the piece of the same chunk on this rank: chunks can differ by one)
    pending = [post(j, send, slots[j, :into.numel()]) for j, (send, into) in
               enumerate(zip(pieces(rank), pieces(rank - 1)))]
    for step in range(p - 1):
        completing = pieces(rank - step - 1)  # the chunk this step completes, sent on at the next step
        receiving = pieces(rank - step - 2)  # the chunk the next step receives
        for j, (mine, work) in enumerate(zip(completing, pending)):
            _wait(work)
            reduce(mine, slots[j, :mine.numel()])
            if step < p - 2:
                pending[j] = post(j, mine, slots[j, :receiving[j].numel()])
            else:  # the chunk is final: the all-gather's first step sends it on, receiving into the tensor
                pending[j] = post(j, mine, pieces(rank)[j])
    # all-gather: each step forwards what the previous one received
    for step in range(1, p - 1):
        received = pieces(rank - step + 1)
        for j, work in enumerate(pending):
            _wait(work)
            pending[j] = post(j, received[j], pieces(rank - step)[j])
    for work in pending:
        _wait(work)
    return tensor


def _pieces(chunk: torch.Tensor, slices: int) -> list[torch.Tensor]:
    """`slices` contiguous views of `chunk`, sizes differing by at most one (some empty when it is short)."""
    return [chunk[start:stop] for start, stop in chunk_bounds(chunk.numel(), slices)]


def _post(send, receive, rank, p, channel: Channel) -> list:
    """Post a send to the successor and a receive from the predecessor on `channel`; the works, not waited on.

    On one group both go in one batch (two batches on one stream would wait on each other: a deadlock); on two
    groups, one batch each, on the groups' own streams."""
    sends = [dist.P2POp(dist.isend, send, (rank + 1) % p, channel.send)] if send.numel() else []
    receives = [dist.P2POp(dist.irecv, receive, (rank - 1) % p, channel.receive)] if receive.numel() else []
    if channel.send is channel.receive:
        batches = [sends + receives]
    else:
        batches = [sends, receives]
    return [work for batch in batches if batch for work in dist.batch_isend_irecv(batch)]


def _wait(works) -> None:
    for work in works:
        work.wait()


class CapturedAllReduce:
    """`all_reduce(tensor, ...)` recorded once as a CUDA graph on every rank; each call replays it on `tensor`.

    Each post of a message through ProcessGroupNCCL costs the host about a tenth of a millisecond, more than a
    slice of a 64 MiB all-reduce takes on NVLink; a replay costs the host one launch, whatever the slices and
    channels. Every rank must construct it at the same point (capture posts no message, but the warm-up run that
    first creates the communicators does), and the tensor's storage must stay the one captured.
    """

    def __init__(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM, *, slices: int | None = None, channels=None):
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cuda":
            raise ValueError(f"tensor must be a CUDA tensor (a CUDA graph records GPU work), got "
                             f"{tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__}")
        self.tensor = tensor
        options = {"slices": slices, "channels": channels}
        all_reduce(tensor.clone(), op, **options)  # creates the communicators: that cannot happen inside a capture
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            all_reduce(tensor, op, check_sizes=False, **options)
        torch.cuda.synchronize()

    def __call__(self) -> torch.Tensor:
        self.graph.replay()
        return self.tensor
