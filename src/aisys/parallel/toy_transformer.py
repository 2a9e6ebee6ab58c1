"""A transformer laid out as the memory planner's formulas assume, in torch: on the meta device to count its
parameters, small on a CPU to measure the activations its backward pass keeps (saved-tensor hooks).

The model is a dict as `aisys.parallel.planner` takes it. Each layer: a norm (weight only), one QKV projection
(`kv_heads` heads for K and V: grouped-query attention, computed group by group so that K and V are never
repeated), softmax with dropout, an output projection and dropout; a norm, an MLP (GeLU, or SwiGLU when `gated`)
and dropout; two residual additions. No biases, no position embeddings, no attention mask. Dropout is
`torch.native_dropout`, which keeps a 1-byte bool mask (F.dropout on a CPU keeps a mask of the input's dtype).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

RECOMPUTE = ("none", "selective", "full")


class Layer(nn.Module):
    def __init__(self, model: dict, dropout: float):
        super().__init__()
        h, a, nkv, f = model["hidden"], model["heads"], model["kv_heads"], model["ffn"]
        self.heads, self.kv_heads, self.head_size, self.dropout = a, nkv, h // a, dropout
        self.norm1 = nn.LayerNorm(h, bias=False)
        self.qkv = nn.Linear(h, (a + 2 * nkv) * self.head_size, bias=False)
        self.out = nn.Linear(a * self.head_size, h, bias=False)
        self.norm2 = nn.LayerNorm(h, bias=False)
        self.gated = model["gated"]
        self.up = nn.Linear(h, (2 if self.gated else 1) * f, bias=False)  # gate and up in one matrix when gated
        self.down = nn.Linear(f, h, bias=False)

    def _drop(self, x):
        return torch.native_dropout(x, self.dropout, self.training)[0]

    def attention_core(self, q, k, v):
        """softmax(q k^T) v per group of heads sharing one K and V: q (B, nkv, g T, hs), k and v (B, nkv, T, hs)."""
        return torch.matmul(self._drop(torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)), v)

    def attention(self, x, recompute: str):
        T, B, _ = x.shape  # (T, B, C): sequence first, as Megatron lays activations out
        a, nkv, hs = self.heads, self.kv_heads, self.head_size
        g = a // nkv
        q, k, v = self.qkv(x).split([a * hs, nkv * hs, nkv * hs], dim=-1)
        q = (q * hs**-0.5).reshape(T, B, nkv, g, hs).permute(1, 2, 3, 0, 4).reshape(B, nkv, g * T, hs)
        k = k.reshape(T, B, nkv, hs).permute(1, 2, 0, 3)  # (B, nkv, T, hs)
        v = v.reshape(T, B, nkv, hs).permute(1, 2, 0, 3)
        if recompute == "selective":  # keep q, k and v; recompute scores, softmax and dropout in the backward pass
            o = checkpoint(self.attention_core, q.contiguous(), k.contiguous(), v.contiguous(), use_reentrant=True)
        else:
            o = self.attention_core(q, k, v)  # (B, nkv, g T, hs)
        o = o.reshape(B, nkv, g, T, hs).permute(3, 0, 1, 2, 4).reshape(T, B, a * hs)
        return self._drop(self.out(o))

    def mlp(self, x):
        u = self.up(x)
        if self.gated:
            gate, up = u.chunk(2, dim=-1)
            u = F.silu(gate) * up
        else:
            u = F.gelu(u)
        return self._drop(self.down(u))

    def _forward(self, x, recompute: str):
        x = x + self.attention(self.norm1(x), recompute)
        return x + self.mlp(self.norm2(x))

    def forward(self, x, recompute: str = "none"):
        if recompute == "full":  # keep only the layer's input
            return checkpoint(self._forward, x, "none", use_reentrant=True)
        return self._forward(x, recompute)


class Transformer(nn.Module):
    def __init__(self, model: dict, dropout: float = 0.1):
        super().__init__()
        self.embedding = nn.Embedding(model["vocab"], model["hidden"])
        self.layers = nn.ModuleList(Layer(model, dropout) for _ in range(model["layers"]))
        self.norm = nn.LayerNorm(model["hidden"], bias=False)
        self.head = nn.Linear(model["hidden"], model["vocab"], bias=False)
        if model["tied"]:
            self.head.weight = self.embedding.weight

    def forward(self, tokens):  # (T, B) token ids -> (T, B, V) logits
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def meta_parameter_count(model: dict) -> int:
    """Parameters of the model built on torch's meta device (no memory allocated); a tied head counts once."""
    with torch.device("meta"):
        return sum(parameter.numel() for parameter in Transformer(model).parameters())


def saved_activation_bytes(model: dict, micro_batch: int, seq: int, recompute: str = "none",
                           dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> int:
    """Bytes that one layer's backward pass keeps for a (seq, micro_batch) input, measured: every tensor autograd
    saves is seen by a saved-tensor hook, and the unique storages behind them (parameters excluded) are added up.
    A tensor saved twice, or two views of one tensor, count once, as they take memory once."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(map(repr, RECOMPUTE))}; got {recompute!r}")
    torch.manual_seed(seed)
    layer = Layer(model, dropout=0.1).to(dtype).train()
    weights = {parameter.untyped_storage().data_ptr() for parameter in layer.parameters()}
    x = torch.randn(seq, micro_batch, model["hidden"], dtype=dtype, requires_grad=True)
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small: more threads only wait for each other (50 ms instead of 2)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            layer(x, recompute)  # what it saved stays alive while the hooks count it
    finally:
        torch.set_num_threads(threads)
    return sum(storages.values())
