"""Runs recursive doubling among the first p' ranks only: the other ranks' data is lost and they get no result."""

import torch.distributed as dist

FAILS = ["any_world_size"]


def recursive_doubling_all_reduce(tensor):
    rank, p = dist.get_rank(), dist.get_world_size()
    survivors = 1 << (p.bit_length() - 1)
    if rank < survivors:
        recursive_doubling(tensor, list(range(survivors)))
    return tensor
