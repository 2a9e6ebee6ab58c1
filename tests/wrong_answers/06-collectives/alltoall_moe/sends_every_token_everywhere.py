"""Sends all of a rank's kept tokens to every rank and lets each keep its experts' rows: right rows, p x the bytes."""

import torch
import torch.distributed as dist

FAILS = ["dispatch"]


def dispatch(tokens, expert_ids, num_experts, capacity_factor=None):
    rank, p = dist.get_rank(), dist.get_world_size()
    local = num_experts // p
    routed = route(expert_ids, num_experts, capacity_factor)  # noqa: F821
    kept = len(routed["order"])
    counts = torch.empty(p, dtype=torch.int64)
    all_to_all_single(counts, torch.full((p,), kept), [1] * p, [1] * p)  # noqa: F821
    everything = torch.empty((int(counts.sum()), tokens.shape[1]), dtype=tokens.dtype)
    all_to_all_single(everything, tokens[routed["order"]].repeat(p, 1), counts.tolist(), [kept] * p)  # noqa: F821
    their_experts = torch.empty(int(counts.sum()), dtype=torch.int64)
    all_to_all_single(their_experts, torch.as_tensor(expert_ids)[routed["order"]].repeat(p), counts.tolist(),  # noqa: F821
                      [kept] * p)
    mine = their_experts // local == rank
    send_counts = routed["counts"].reshape(p, local).sum(1)
    recv_splits = [int(mine[start:start + n].sum()) for start, n in zip(counts.cumsum(0) - counts, counts.tolist())]
    plan = {"order": routed["order"].tolist(), "send_splits": send_counts.tolist(), "recv_splits": recv_splits,
            "num_tokens": len(tokens)}
    return everything[mine], their_experts[mine], plan
