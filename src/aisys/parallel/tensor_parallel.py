"""Tensor parallelism (Megatron-LM): an MLP split by columns then rows, attention split by heads, Megatron's f and g.

Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism" (2019), section 3. The MLP Y = GeLU(X W1 + b1) W2 + b2 on p ranks:

- W1 (C, F) is split by **columns**: rank i holds W1[:, i F/p : (i+1) F/p] and that slice of b1,
  so it computes its own F/p columns of the hidden activation, and GeLU, elementwise, applies to
  them without any communication (a split by rows would leave each rank a partial SUM of the
  hidden activation, and GeLU(a + b) is not GeLU(a) + GeLU(b));
- W2 (F, C) is split by **rows**, the same F/p: rank i's product H_i W2_i is a partial sum of
  the output, and one all-reduce sums them; b2 is added once, after that sum.

Megatron's two conjugate operators put the communication in (megatron/core/tensor_parallel/
mappings.py, `_CopyToModelParallelRegion` and `_ReduceFromModelParallelRegion`):

- f, `copy_to_tensor_parallel`: the identity forward; all-reduce of the gradient backward (every
  rank's slice of the layer used X, so X's gradient is the sum of their contributions);
- g, `reduce_from_tensor_parallel`: all-reduce forward; the identity backward (the output's
  gradient is the same on every rank, and each rank's partial sum contributes to it with slope 1).

An MLP block is f, then the two matmuls, then g: one all-reduce of the activation (tokens x C)
forward and one backward. Attention is split the same way by heads: Q, K and V by columns (whole
heads per rank), the output projection by rows. A transformer layer (attention + MLP) costs two
all-reduces forward and two backward.

Here f and g are plain functions, not autograd.Function classes: f registers a tensor hook that
all-reduces the gradient flowing through it; g returns `reduced + (x - x.detach())`, whose value is
the reduced tensor (the second term is exactly zero) and whose gradient with respect to x is the
identity (the straight-through form).

The page's arithmetic: `allreduce_bytes_per_layer` (communication of one layer) and
`activation_bytes_per_layer` (Korthikanti et al. 2022, Table 2: activation memory with tensor and
sequence parallelism).
"""

import math

import torch
import torch.distributed as dist

from .._validate import nonnegative_int, positive_int


# ---------------------------------------------------------------------------------------------- sharding


def _split(name: str, size: int, world_size: int, what: str) -> int:
    """The size of one rank's part of `size`; ValueError naming `name` unless it splits evenly."""
    if size % world_size:
        raise ValueError(f"{name} has {size} {what}, which do not split evenly over world_size = {world_size}: "
                         f"expected a multiple of {world_size}")
    return size // world_size


def _check_rank(rank, world_size) -> None:
    positive_int("world_size", world_size)
    nonnegative_int("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size = {world_size}), got {rank}")


def _check_matrix(name: str, w, rows: int | None = None, columns: int | None = None) -> None:
    if len(w.shape) != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got shape {tuple(w.shape)}")
    if (rows is not None and w.shape[0] != rows) or (columns is not None and w.shape[1] != columns):
        want = f"({rows if rows is not None else '*'}, {columns if columns is not None else '*'})"
        raise ValueError(f"{name} must have shape {want}, got {tuple(w.shape)}")


def shard_mlp(w1, b1, w2, rank: int, world_size: int):
    """Rank `rank`'s shards of the MLP GeLU(x @ w1 + b1) @ w2 + b2: w1 (C, F) and b1 (F,) by columns, w2 (F, C)
    by rows, the same F / world_size slice. b2 is not sharded: every rank holds it whole. Works on numpy arrays
    and tensors (the shards are slices of the same kind)."""
    _check_rank(rank, world_size)
    _check_matrix("w1", w1)
    hidden = w1.shape[1]
    if len(b1.shape) != 1 or b1.shape[0] != hidden:
        raise ValueError(f"b1 must have shape ({hidden},) (w1's columns), got {tuple(b1.shape)}")
    _check_matrix("w2", w2, rows=hidden, columns=w1.shape[0])
    width = _split("w1", hidden, world_size, "columns (the hidden width F)")
    columns = slice(rank * width, (rank + 1) * width)
    return w1[:, columns], b1[columns], w2[columns, :]


def shard_attention(wq, wk, wv, wo, n_heads: int, rank: int, world_size: int):
    """Rank `rank`'s shards of multi-head attention with n_heads heads: wq, wk, wv (C, C) by columns, whole
    heads (head h is columns h*hs .. (h+1)*hs, hs = C / n_heads), n_heads / world_size consecutive heads per
    rank; wo (C, C) by the same rows. Its bias is not sharded."""
    _check_rank(rank, world_size)
    positive_int("n_heads", n_heads)
    _check_matrix("wq", wq)
    width = wq.shape[0]
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        _check_matrix(name, w, rows=width, columns=width)
    head_size = _split("wq", width, n_heads, f"columns for n_heads = {n_heads} heads")
    heads = _split("n_heads", n_heads, world_size, "heads")
    columns = slice(rank * heads * head_size, (rank + 1) * heads * head_size)
    return wq[:, columns], wk[:, columns], wv[:, columns], wo[columns, :]


# ---------------------------------------------------------------------------------------------- f and g


def copy_to_tensor_parallel(x: torch.Tensor) -> torch.Tensor:
    """Megatron's f: x itself forward; backward, the gradient summed over the ranks.

    The hook sits on a view of x, not on x, so that it acts only on the gradient that flows
    through this use of x (a residual connection's share of x's gradient must not be summed).
    """
    y = x.view_as(x)
    if y.requires_grad:

        def all_reduce_gradient(grad):
            total = grad.clone()  # the incoming gradient may be shared with other consumers: reduce a copy
            dist.all_reduce(total)
            return total

        y.register_hook(all_reduce_gradient)
    return y


def reduce_from_tensor_parallel(x: torch.Tensor) -> torch.Tensor:
    """Megatron's g: forward, x summed over the ranks; backward, the identity.

    dist.all_reduce is invisible to autograd, so the sum is taken on a detached copy and the
    gradient path restored by adding x - x.detach(): exactly zero in value, slope 1 in x.
    """
    reduced = x.detach().clone()
    dist.all_reduce(reduced)
    return reduced + (x - x.detach())


# ---------------------------------------------------------------------------------------------- layers


def mlp(x: torch.Tensor, w1, b1, w2, b2) -> torch.Tensor:
    """The unsharded MLP: GeLU(x @ w1 + b1) @ w2 + b2 (exact, erf GeLU)."""
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2


def tp_mlp(x: torch.Tensor, w1_shard, b1_shard, w2_shard, b2) -> torch.Tensor:
    """The MLP on this rank's shards: g(GeLU(f(x) @ W1_i + b1_i) @ W2_i) + b2, equal on every rank to `mlp` on the
    whole weights. One all-reduce of x's size forward (g), one backward (f); b2 added once, after the sum."""
    hidden = torch.nn.functional.gelu(copy_to_tensor_parallel(x) @ w1_shard + b1_shard)  # this rank's F/p columns
    return reduce_from_tensor_parallel(hidden @ w2_shard) + b2


def _heads(x: torch.Tensor, wq, wk, wv, wo, head_size: int, causal: bool) -> torch.Tensor:
    """Attention of the heads whose columns wq, wk, wv hold, projected by wo's matching rows: (B, T, C) in, this
    rank's partial sum of the output out."""
    batch, tokens, _ = x.shape
    heads = wq.shape[1] // head_size

    def split(projection):  # (B, T, heads * hs) -> (B, heads, T, hs)
        return (x @ projection).reshape(batch, tokens, heads, head_size).transpose(1, 2)

    q, k, v = split(wq), split(wk), split(wv)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_size)  # (B, heads, T, T)
    if causal:
        future = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, heads, T, hs)
    return out.transpose(1, 2).reshape(batch, tokens, heads * head_size) @ wo


def attention(x: torch.Tensor, wq, wk, wv, wo, bo, head_size: int, causal: bool) -> torch.Tensor:
    """The unsharded multi-head attention: softmax(Q K^T / sqrt(hs)) V per head, concatenated, @ wo + bo."""
    return _heads(x, wq, wk, wv, wo, head_size, causal) + bo


def tp_attention(x: torch.Tensor, wq_shard, wk_shard, wv_shard, wo_shard, bo, head_size: int,
                 causal: bool) -> torch.Tensor:
    """Attention on this rank's heads: g(heads(f(x)) @ wo_i) + bo, equal on every rank to `attention` on the whole
    weights; one all-reduce forward, one backward."""
    return reduce_from_tensor_parallel(
        _heads(copy_to_tensor_parallel(x), wq_shard, wk_shard, wv_shard, wo_shard, head_size, causal)) + bo


# ---------------------------------------------------------------------------------------------- the arithmetic


def allreduce_bytes_per_layer(tokens: int, hidden: int, world_size: int, bytes_per_element: int = 2) -> dict:
    """Communication of one transformer layer (attention + MLP) under tensor parallelism, per pass.

    Each block all-reduces its output activation (tokens x hidden) forward (g) and its input's
    gradient backward (f): two all-reduces per layer per pass. A ring all-reduce of n bytes
    sends 2 (p - 1) / p * n per rank ({doc}`../06-collectives/ring`); sequence parallelism
    replaces each by a reduce-scatter and an all-gather, (p - 1) / p * n each: the same bytes.
    """
    positive_int("tokens", tokens)
    positive_int("hidden", hidden)
    positive_int("world_size", world_size)
    positive_int("bytes_per_element", bytes_per_element)
    activation = tokens * hidden * bytes_per_element
    per_allreduce = 2 * (world_size - 1) / world_size * activation
    return {"activation_bytes": activation, "allreduces_per_pass": 2,
            "sent_per_rank_per_pass": 2 * per_allreduce, "sent_per_rank_per_step": 4 * per_allreduce}


def activation_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                               sequence_parallel: bool = False) -> float:
    """Activation memory of one transformer layer in 16-bit training, per GPU (Korthikanti et al. 2022, Table 2):

    - no parallelism:           s b h (34 + 5 a s / h)
    - tensor parallel (t):      s b h (10 + 24 / t + 5 a s / (h t))
    - tensor + sequence (t):    s b h (34 / t + 5 a s / (h t))

    The 10 s b h that tensor parallelism leaves whole on every rank are the two LayerNorms' inputs (4 s b h),
    their outputs, which the first matmul of each block keeps (4 s b h), and the two dropout masks (2 s b h, a
    byte an element); sequence parallelism splits them along the sequence.
    """
    for name, value in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads), ("tp", tp)):
        positive_int(name, value)
    sbh, attention_term = seq * batch * hidden, 5 * heads * seq / hidden
    if sequence_parallel:
        return sbh * (34 / tp + attention_term / tp)
    return sbh * (10 + 24 / tp + attention_term / tp)
