"""Sends every tensor to rank 0, which sums them and sends the sum back: right sums, but rank 0 moves (p - 1)·n each way."""

import torch.distributed as dist

FAILS = ["ring_all_reduce"]


def ring_all_reduce(tensor):
    rank, p = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        received = tensor.clone()
        for other in range(1, p):
            dist.recv(received, other)
            tensor.add_(received)
        for other in range(1, p):
            dist.send(tensor, other)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)
