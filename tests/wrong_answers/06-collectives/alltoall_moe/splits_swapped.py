"""Cuts output by input_splits and input by output_splits: the two lists of splits swapped."""

import torch.distributed as dist

FAILS = ["all_to_all_single", "all_to_all_schedule", "dispatch", "combine"]


def all_to_all_single(output, input, output_splits, input_splits):
    rank, p = dist.get_rank(), dist.get_world_size()
    sends = input.split(output_splits)
    receives = output.split(input_splits)
    receives[rank].copy_(sends[rank])
    for k in range(1, p):
        send_to, receive_from = (rank + k) % p, (rank - k) % p
        requests = []
        if output_splits[send_to]:
            requests.append(dist.isend(sends[send_to].contiguous(), send_to))
        if input_splits[receive_from]:
            requests.append(dist.irecv(receives[receive_from], receive_from))
        for request in requests:
            request.wait()
    return output
