"""Applies the capacity to the rank's tokens as a whole (the first capacity x E tokens), not to each expert."""

import math

import torch

FAILS = ["route", "dispatch"]


def route(expert_ids, num_experts, capacity_factor=None):
    expert_ids = torch.as_tensor(expert_ids, dtype=torch.int64)
    if capacity_factor is not None:
        capacity = math.ceil(len(expert_ids) * capacity_factor / num_experts)
        kept_tokens = torch.arange(len(expert_ids)) < capacity * num_experts
        dropped = int((~kept_tokens).sum())
    else:
        kept_tokens, dropped = torch.ones(len(expert_ids), dtype=torch.bool), 0
    order = torch.argsort(expert_ids, stable=True)
    order = order[kept_tokens[order]]
    return {"order": order, "counts": torch.bincount(expert_ids[order], minlength=num_experts), "dropped": dropped}
