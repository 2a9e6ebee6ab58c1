"""Starts the reduce-scatter one chunk early (sends chunk (r - s - 1) % p in step s): rank r ends with chunk r complete,
not (r + 1) % p, and the all-gather then spreads partial sums."""

import torch
import torch.distributed as dist

FAILS = ["ring_reduce_scatter", "ring_all_reduce"]


def ring_reduce_scatter(tensor):
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = [tensor[start:stop] for start, stop in chunk_bounds(tensor.numel(), p)]  # noqa: F821
    buffer = torch.empty_like(chunks[0])
    for step in range(p - 1):
        mine = chunks[(rank - step - 2) % p]
        exchange(chunks[(rank - step - 1) % p], buffer[:mine.numel()])  # noqa: F821
        mine.add_(buffer[:mine.numel()])
