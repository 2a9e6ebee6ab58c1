"""A decoder-only transformer in torch, built from an `aisys.model_memory` dict on the meta device (no memory
allocated) so that its parameters can be counted by torch rather than by a formula.

The layout is the one `aisys.model_memory` states: nn.Linear for every projection (a bias when the model's `bias`,
none for the output head and the router), nn.RMSNorm or nn.LayerNorm, nn.Embedding for tokens and learned
positions, a tied head sharing the embedding's Parameter (which `parameters()` yields once), grouped-query or
latent attention, SwiGLU or plain MLPs, MoE layers holding each expert as its own module. Only the modules matter
here: the forward pass is not defined (activations are measured on `aisys.parallel.toy_transformer`).
"""

import torch
from torch import nn

from .model_memory import validate


def _norm(width: int, model: dict) -> nn.Module:
    return nn.LayerNorm(width) if model["norm"] == "layernorm" else nn.RMSNorm(width)


class MLP(nn.Module):
    def __init__(self, model: dict, width: int):
        super().__init__()
        h, bias = model["hidden"], model["bias"]
        if model["gated"]:
            self.gate = nn.Linear(h, width, bias=bias)
        self.up = nn.Linear(h, width, bias=bias)
        self.down = nn.Linear(width, h, bias=bias)


class MoE(nn.Module):
    def __init__(self, model: dict):
        super().__init__()
        self.router = nn.Linear(model["hidden"], model["experts"], bias=False)
        self.experts = nn.ModuleList(MLP(model, model["expert_ffn"]) for _ in range(model["experts"]))
        self.shared = nn.ModuleList(MLP(model, model["expert_ffn"]) for _ in range(model["shared_experts"]))


class Attention(nn.Module):
    def __init__(self, model: dict):
        super().__init__()
        h, a, d, bias = model["hidden"], model["heads"], model["head_dim"], model["bias"]
        self.q = nn.Linear(h, a * d, bias=bias)
        self.k = nn.Linear(h, model["kv_heads"] * d, bias=bias)
        self.v = nn.Linear(h, model["kv_heads"] * d, bias=bias)
        self.o = nn.Linear(a * d, h, bias=bias)


class LatentAttention(nn.Module):
    """DeepSeek-V2's multi-head latent attention, as its modeling code names the projections."""

    def __init__(self, model: dict):
        super().__init__()
        h, a, d, bias = model["hidden"], model["heads"], model["head_dim"], model["bias"]
        rope, c, cq = model["rope_dim"], model["kv_rank"], model["q_rank"]
        if cq:
            self.q_a_proj = nn.Linear(h, cq, bias=bias)
            self.q_a_norm = _norm(cq, model)
            self.q_b_proj = nn.Linear(cq, a * (d + rope), bias=bias)
        else:
            self.q_proj = nn.Linear(h, a * (d + rope), bias=bias)
        self.kv_a_proj_with_mqa = nn.Linear(h, c + rope, bias=bias)  # the latent and the rotary key of all heads
        self.kv_a_norm = _norm(c, model)
        self.kv_b_proj = nn.Linear(c, a * 2 * d, bias=bias)  # keys (no rope part) and values, per head
        self.o_proj = nn.Linear(a * d, h, bias=bias)


class Layer(nn.Module):
    def __init__(self, model: dict, moe: bool):
        super().__init__()
        self.norm1 = _norm(model["hidden"], model)
        self.attention = LatentAttention(model) if model["kv_rank"] else Attention(model)
        self.norm2 = _norm(model["hidden"], model)
        self.mlp = MoE(model) if moe else MLP(model, model["ffn"])


class Transformer(nn.Module):
    def __init__(self, model: dict):
        super().__init__()
        model = validate(model)
        self.model = model
        self.embedding = nn.Embedding(model["vocab"], model["hidden"])
        if model["positions"]:
            self.positions = nn.Embedding(model["positions"], model["hidden"])
        first_moe = model["dense_layers"] if model["experts"] else model["layers"]
        self.layers = nn.ModuleList(Layer(model, i >= first_moe) for i in range(model["layers"]))
        self.norm = _norm(model["hidden"], model)
        self.head = nn.Linear(model["hidden"], model["vocab"], bias=False)
        if model["tied"]:
            self.head.weight = self.embedding.weight


def build(model: dict) -> Transformer:
    """The model on the meta device: shapes only, built in milliseconds even for hundreds of billions of weights."""
    with torch.device("meta"):
        return Transformer(model)


def _numel(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())


def count(model: dict) -> dict:
    """{"total", "active"} counted by torch: all parameters (a shared Parameter once), and all but the routed
    experts one token skips, counted expert by expert from the modules."""
    net = build(model)
    total = _numel(net)
    skipped = 0
    for layer in net.layers:
        if isinstance(layer.mlp, MoE):
            sizes = sorted(_numel(expert) for expert in layer.mlp.experts)
            skipped += sum(sizes[: len(sizes) - net.model["top_k"]])  # experts are alike: any top_k of them
    return {"total": total, "active": total - skipped}
