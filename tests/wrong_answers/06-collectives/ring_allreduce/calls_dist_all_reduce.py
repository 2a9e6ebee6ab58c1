"""Calls dist.all_reduce inside: the right sums, and none of the exercise."""

import torch.distributed as dist

FAILS = ["ring_all_reduce"]


def ring_all_reduce(tensor):
    dist.all_reduce(tensor)
