"""Places the blocks in the order they arrive (own block, then from r - 1, r - 2, ...) instead of by source rank."""

import torch
import torch.distributed as dist

FAILS = ["all_to_all_single", "dispatch", "combine"]


def all_to_all_single(output, input, output_splits, input_splits):
    rank, p = dist.get_rank(), dist.get_world_size()
    sends = input.split(input_splits)
    arrived = [sends[rank].clone()]
    for k in range(1, p):
        send_to, receive_from = (rank + k) % p, (rank - k) % p
        block = torch.empty((output_splits[receive_from], *output.shape[1:]), dtype=output.dtype)
        requests = []
        if input_splits[send_to]:
            requests.append(dist.isend(sends[send_to].contiguous(), send_to))
        if output_splits[receive_from]:
            requests.append(dist.irecv(block, receive_from))
        for request in requests:
            request.wait()
        arrived.append(block)
    output.copy_(torch.cat(arrived))
    return output
