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

Channels. NCCL runs one send/receive between two ranks on only some of its p2p channels (thread blocks,
each copying part of the message): it gives an operation its communicator's p2p channels divided by the
number of ranks (`scheduleP2pTasksToPlan` in NCCL's enqueue.cc), as if every rank talked to every other at
once, though a ring talks to two. NCCL 2.28 on 4 H200s sets up 32 p2p channels, so a send of up to 128 MiB
runs on 8 thread blocks, against 16 on 2 GPUs: that, and not the host, is why the readable ring reaches
under half of NCCL's all-reduce on 4 GPUs (benchmarks/allreduce.py, and the book's ring page). A slice posted
on another communicator runs on that communicator's stream, at the same time, on channels of its own:
`ring_channels(count)` makes `count` communicators over all ranks, and slice j travels on channel j % count.
NCCL's own all-reduce does the same inside one kernel: its ring runs on all its channels at once.

Host time. Each post through ProcessGroupNCCL costs the host about a tenth of a millisecond, so that 8
slices on 4 ranks (48 posts) take longer to queue than NCCL takes to all-reduce 64 MiB.
`CapturedAllReduce` records the whole ring once as a CUDA graph and replays it for one launch's cost.

Each slice receives into a slot of its own (slices of successive steps differ by an element where chunk
sizes differ), so that a slice still waiting for its addition is never overwritten by the next step's.
"""

import torch
import torch.distributed as dist

from .._validate import positive_int
from .ring import _chunk, _prepare, chunk_bounds, post_exchange

SLICE_BYTES = 16 * 2**20  # slices no smaller than this, beyond one per channel: each message costs a launch
MAX_SLICES = 16
CHANNELS = 8  # the best of 1, 2, 4 and 8 on 2 and 4 H200s (benchmarks/allreduce.py)


def default_slices(nbytes: int, p: int, channels: int = 1) -> int:
    """Slices per chunk of a tensor of `nbytes` on p ranks: one per channel at least, more for chunks of more than
    `channels` x SLICE_BYTES, at most MAX_SLICES. On 4 H200s: 8 slices over 8 channels at 64 MiB and 256 MiB,
    16 at 1 GiB, each the best of 1, 4, 8 and 16."""
    chunk = nbytes // positive_int("p", p)
    return max(positive_int("channels", channels), min(MAX_SLICES, chunk // SLICE_BYTES))


def ring_channels(count: int = CHANNELS) -> list:
    """`count` process groups over all ranks, for `all_reduce(..., channels=)`. Every rank must call it at the
    same point (creating a group is collective over the world). Each group's communicator is set up here, by a
    barrier, rather than by its first message (which must not happen inside a CUDA graph's capture)."""
    count = positive_int("count", count)
    groups = [dist.new_group(list(range(dist.get_world_size()))) for _ in range(count)]
    for group in groups:
        dist.barrier(group=group)
    return groups


def all_reduce(tensor: torch.Tensor, op=dist.ReduceOp.SUM, *, slices: int | None = None,
               channels: list | None = None, check_sizes: bool = True) -> torch.Tensor:
    """Reduce `tensor` over all ranks in place with the ring's messages, pipelined by slices; returns it.

    `slices`: pieces per chunk (default `default_slices`). `channels`: from `ring_channels`,
    to spread the slices over (default: the default group alone, as `ring.py` posts). op and check_sizes as in
    `ring.all_reduce`."""
    reduce = _prepare(tensor, op, check_sizes)
    rank, p = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    if p == 1 or flat.numel() == 0:
        return tensor
    channels = list(channels) if channels else [None]  # None: the default group
    nbytes = flat.numel() * flat.element_size()
    slices = default_slices(nbytes, p, len(channels)) if slices is None else positive_int("slices", slices)
    bounds = chunk_bounds(flat.numel(), p)
    slots = torch.empty(slices, -(-(bounds[0][1] - bounds[0][0]) // slices), dtype=flat.dtype, device=flat.device)

    def pieces(c):
        return _pieces(_chunk(flat, bounds, c), slices)

    def post(j, send, receive):
        # one batch per slice on its channel: a send and a receive in two batches on one group's stream would each
        # wait for the other around the ring (a deadlock)
        return post_exchange(send, receive, channels[j % len(channels)])

    # reduce-scatter: slice j of step s + 1 is posted once slice j of step s is added
    # (a received piece has the length of the piece of the same chunk on this rank: chunks can differ by one)
    own = pieces(rank)
    pending = [post(j, send, slots[j, :into.numel()]) for j, (send, into) in enumerate(zip(own, pieces(rank - 1)))]
    for step in range(p - 1):
        completing = pieces(rank - step - 1)  # the chunk this step completes, sent on at the next step
        receiving = pieces(rank - step - 2)  # the chunk the next step receives
        for j, (mine, work) in enumerate(zip(completing, pending)):
            _wait(work)
            reduce(mine, slots[j, :mine.numel()])
            if step < p - 2:
                pending[j] = post(j, mine, slots[j, :receiving[j].numel()])
            else:  # the chunk is final: the all-gather's first step sends it on, receiving into the tensor
                pending[j] = post(j, mine, own[j])
    # all-gather: each step forwards what the previous one received
    for step in range(1, p - 1):
        received, receiving = pieces(rank - step + 1), pieces(rank - step)
        for j, work in enumerate(pending):
            _wait(work)
            pending[j] = post(j, received[j], receiving[j])
    for work in pending:
        _wait(work)
    return tensor


def _pieces(chunk: torch.Tensor, slices: int) -> list[torch.Tensor]:
    """`slices` contiguous views of `chunk`, sizes differing by at most one (some empty when it is short)."""
    return [chunk[start:stop] for start, stop in chunk_bounds(chunk.numel(), slices)]


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


def nccl_p2p_channels(nbytes: int, n_ranks: int, p2p_channels: int, per_peer: int,
                      chunk_bytes: int = 512 * 2**10) -> int:
    """Thread blocks (channels) NCCL gives one send or receive of `nbytes` within a node: its rule in
    `scheduleP2pTasksToPlan` and `addP2pToPlan` (src/enqueue.cc, NCCL 2.28). `p2p_channels` and `per_peer` are what
    NCCL's log reports at start ("32 p2p channels, 32 p2p channels per peer"), `chunk_bytes` its "P2P Chunksize".

    An operation starts from per_peer halved until per_peer x n_ranks fits in p2p_channels, and doubles (up to
    per_peer) only while each channel's part exceeds 32 chunks."""
    nbytes, n_ranks = positive_int("nbytes", nbytes), positive_int("n_ranks", n_ranks)
    p2p_channels, per_peer = positive_int("p2p_channels", p2p_channels), positive_int("per_peer", per_peer)
    chunk_bytes = positive_int("chunk_bytes", chunk_bytes)
    least = per_peer
    while least * n_ranks > p2p_channels and least > 1:
        least //= 2
    smallest_part, largest_part = chunk_bytes // 8, chunk_bytes * 32
    channels = min(least, -(-nbytes // smallest_part))
    part = max(smallest_part, -(-nbytes // channels))
    while part > largest_part and channels <= per_peer // 2:
        channels *= 2
        part = -(-nbytes // channels)
    return channels
