"""A chain: rank r + 1 sends to r, down to rank 0, and the sum goes back up the chain: 2(p - 1) hops deep."""

import torch
import torch.distributed as dist

FAILS = ["tree_all_reduce"]


def tree_all_reduce(tensor):
    rank, p = dist.get_rank(), dist.get_world_size()
    if rank + 1 < p:
        buffer = torch.empty_like(tensor)
        dist.recv(buffer, rank + 1)
        tensor += buffer
    if rank:
        dist.send(tensor, rank - 1)
        dist.recv(tensor, rank - 1)
    if rank + 1 < p:
        dist.send(tensor, rank + 1)
    return tensor
