"""Keeps the last tokens to arrive at a full expert and drops the first ones (Switch keeps the first)."""

import math

import torch

FAILS = ["route", "dispatch"]


def route(expert_ids, num_experts, capacity_factor=None):
    expert_ids = torch.as_tensor(expert_ids, dtype=torch.int64)
    order = torch.argsort(expert_ids, stable=True)
    counts = torch.bincount(expert_ids, minlength=num_experts)
    if capacity_factor is None:
        return {"order": order, "counts": counts, "dropped": 0}
    capacity = math.ceil(len(expert_ids) * capacity_factor / num_experts)
    last_of_expert = torch.cumsum(counts, 0)
    places_from_the_end = last_of_expert[expert_ids[order]] - torch.arange(len(expert_ids))
    kept = places_from_the_end <= capacity
    return {"order": order[kept], "counts": counts.clamp(max=capacity), "dropped": int((~kept).sum())}
