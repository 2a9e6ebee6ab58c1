"""Every rank calls a blocking dist.send to its successor before dist.recv: each waits for the other, a deadlock."""

import torch
import torch.distributed as dist

FAILS = ["ring_all_reduce"]


def ring_all_reduce(tensor):
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = [tensor[start:stop] for start, stop in chunk_bounds(tensor.numel(), p)]  # noqa: F821
    buffer = torch.empty_like(chunks[0])
    for step in range(p - 1):
        mine = chunks[(rank - step - 1) % p]
        dist.send(chunks[(rank - step) % p], (rank + 1) % p)
        dist.recv(buffer[:mine.numel()], (rank - 1) % p)
        mine.add_(buffer[:mine.numel()])
    for step in range(p - 1):
        dist.send(chunks[(rank + 1 - step) % p], (rank + 1) % p)
        dist.recv(chunks[(rank - step) % p], (rank - 1) % p)
