"""Sends to position r + 2^k and receives from r - 2^k (mod p) instead of swapping with r XOR 2^k."""

import torch
import torch.distributed as dist

FAILS = ["recursive_doubling", "any_world_size"]


def recursive_doubling(tensor, group):
    me, p, buffer = group.index(dist.get_rank()), len(group), torch.empty_like(tensor)
    distance = 1
    while distance < p:
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, group[(me + distance) % p]),
                                        dist.P2POp(dist.irecv, buffer, group[(me - distance) % p])])
        for work in works:
            work.wait()
        tensor += buffer
        distance *= 2
