"""Sends in the loop `for q in range(p)`: every rank sends to rank 0 first, then all to rank 1 (no schedule)."""

import torch.distributed as dist

FAILS = ["all_to_all_schedule"]


def all_to_all_single(output, input, output_splits, input_splits):
    rank, p = dist.get_rank(), dist.get_world_size()
    sends = input.split(input_splits)
    receives = output.split(output_splits)
    requests = []
    for q in range(p):
        if q == rank:
            receives[rank].copy_(sends[rank])
            continue
        if input_splits[q]:
            requests.append(dist.isend(sends[q].contiguous(), q))
        if output_splits[q]:
            requests.append(dist.irecv(receives[q], q))
    for request in requests:
        request.wait()
    return output
