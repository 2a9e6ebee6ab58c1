# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a tensor-parallel MLP and attention (Megatron-LM)
#
# **You will learn** to split one transformer layer over $p$ processes the way Megatron-LM does
# (Shoeybi et al., 2019, section 3): the MLP's first matrix by columns and its second by rows,
# attention by heads, with Megatron's two conjugate operators $f$ and $g$ placing exactly **one
# all-reduce forward and one backward per block**, and the output bias added once. The result
# on every rank equals the unsharded layer, forward and backward, while each rank holds and
# multiplies $1/p$ of the weights.
#
# **Conventions** (the checks rely on every one):
#
# - **Layout.** Activations are row-major with the model width $C$ last: the MLP takes `x` of
#   shape `(..., C)` (any leading dimensions: `(tokens, C)` or `(B, T, C)`), attention takes
#   `(B, T, C)`. A weight is stored `(in, out)`, so a linear layer is `x @ w + b`.
# - **The MLP** is `gelu(x @ w1 + b1) @ w2 + b2` with `w1` $(C, F)$, `b1` $(F,)$, `w2` $(F, C)$,
#   `b2` $(C,)$ and the exact GeLU (`torch.nn.functional.gelu`, erf form).
# - **Attention** has `n_heads` heads of size `hs = C // n_heads`; head $h$ is columns
#   $h \cdot hs$ to $(h+1) \cdot hs$ of `wq`, `wk` and `wv` (each $(C, C)$, no biases), and rows
#   $h \cdot hs$ to $(h+1) \cdot hs$ of `wo` $(C, C)$, whose bias `bo` $(C,)$ is added at the end.
#   Scores are $q k^\top / \sqrt{hs}$; with `causal=True` position $t$ attends to positions
#   $\le t$ only; softmax over the keys.
# - **Shards.** Rank $r$ of $p$ takes the $r$-th of $p$ equal contiguous slices, rank 0 first:
#   `w1[:, r*F/p:(r+1)*F/p]`, the same slice of `b1`, `w2[r*F/p:(r+1)*F/p, :]`; for attention
#   heads $r \cdot n_h/p$ to $(r+1) \cdot n_h/p$. `b2` and `bo` are **not** sharded: every rank holds
#   them whole. A shard function returns slices of its arguments (numpy arrays or tensors) as a
#   tuple: `(w1_shard, b1_shard, w2_shard)`, `(wq_shard, wk_shard, wv_shard, wo_shard)`.
# - **Errors.** A split that is not even raises `ValueError` whose message names the argument
#   (`w1` when $F$ is not a multiple of `world_size`, `n_heads` when the heads are not) and what
#   was expected (a multiple of `world_size`, with its value); so does a rank outside
#   $[0, p)$ (naming `rank`).
# - **f and g.** `copy_to_tensor_parallel(x)` returns `x`'s values; backward, it sums the gradient
#   over the ranks. `reduce_from_tensor_parallel(x)` returns the sum over the ranks of `x`;
#   backward, the gradient passes unchanged. Both keep `x`'s shape and dtype.
# - **Results.** `tp_mlp` and `tp_attention` return the whole layer's output, the same on every
#   rank, in the dtype of `x` (the checks use float64).
#
# **What is checked.** On 1, 2 and 4 gloo processes (and 2 GPUs over NCCL, where there are
# some): each rank builds the whole layer in float64 from a seed, takes its shard, runs your
# `tp_mlp` or `tp_attention`, then backward from a random upstream gradient (the same on every
# rank). The output, the input's gradient, the gradient of each rank's shards and of `b2` (or
# `bo`) are compared with the unsharded layer's, within $10^{-9}$ of their scale (float64 sums
# in another order differ by about $10^{-14}$; anything computed in float32 differs by
# $10^{-7}$). Every collective your code posts is recorded, with a mark between the forward and
# the backward pass: each block must post **exactly one** `all_reduce` forward and **one**
# backward, each of the activation's size (its number of elements: that of `x`). On one rank
# an all-reduce may be skipped. $f$ and $g$ are also checked alone, on inputs and gradients that
# differ on every rank.
#
# **Where it runs.** The functions that run on ranks are run again by the grader from the
# source of the cells you ran, in the ranks' dialect: plain Python, `torch`,
# `torch.distributed`, `numpy`, `math`; no `class`, no `with`, no names starting with `_`
# (so no `torch.autograd.Function` subclass: $f$ and $g$ are written with a tensor hook and
# `detach`). A definition outside the dialect fails its check, naming the line and why. When
# grading, only the aisys modules in this exercise's `student_may_import` can be imported; the
# reference answers cannot.

# %%
import math

import torch
import torch.distributed as dist
from aisys.collectives import traffic
from aisys.collectives.launch import RanksFailed, run_ranks
from aisys_grader import checker

check = checker("05-parallel-training/tensor_parallel", globals())

# %% [markdown]
# ## 1. Shards
#
# Why columns first: each rank computes `x @ w1[:, mine] + b1[mine]`, which is **its own
# columns** of the hidden activation, complete; GeLU acts on each element alone, so each rank
# applies it to its columns with no communication. Had `w1` been split by rows (with `x` split
# by columns), each rank would hold a partial **sum** of the whole hidden activation, and
# $\mathrm{GeLU}(a + b) \ne \mathrm{GeLU}(a) + \mathrm{GeLU}(b)$: an all-reduce would be needed
# before the GeLU. Then `w2` split by rows matches those columns: rank $r$'s product
# `h[:, mine] @ w2[mine, :]` is its term of the sum over the hidden dimension, and one sum over
# the ranks gives the output.

# %% tags=["solution"]
def shard_mlp(w1, b1, w2, rank, world_size):
    """Rank's shards (w1 by columns, b1 likewise, w2 by rows); ValueError if the hidden width does not split."""
    ### BEGIN SOLUTION
    if rank < 0 or rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size = {world_size}), got {rank}")
    hidden = w1.shape[1]
    if hidden % world_size:
        raise ValueError(f"w1 has {hidden} columns (the hidden width F), which do not split evenly over "
                         f"world_size = {world_size}: expected a multiple of {world_size}")
    width = hidden // world_size
    start, stop = rank * width, (rank + 1) * width
    return w1[:, start:stop], b1[start:stop], w2[start:stop, :]
    ### END SOLUTION


def shard_attention(wq, wk, wv, wo, n_heads, rank, world_size):
    """Rank's heads: columns of wq, wk, wv and the same rows of wo; ValueError if the heads do not split."""
    ### BEGIN SOLUTION
    if rank < 0 or rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size = {world_size}), got {rank}")
    if n_heads % world_size:
        raise ValueError(f"n_heads = {n_heads} heads do not split evenly over world_size = {world_size}: "
                         f"expected a multiple of {world_size}")
    head_size = wq.shape[1] // n_heads
    width = n_heads // world_size * head_size
    start, stop = rank * width, (rank + 1) * width
    return wq[:, start:stop], wk[:, start:stop], wv[:, start:stop], wo[start:stop, :]
    ### END SOLUTION


# %% tags=["check"]
check("shard_mlp")
### BEGIN HIDDEN TESTS
check("shard_mlp", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("shard_attention")
### BEGIN HIDDEN TESTS
check("shard_attention", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Megatron's f and g
#
# Each rank holds the whole input `x` but uses it only through its own slice of `w1`. So the
# gradient of `x` is the **sum** of the ranks' contributions, which no rank has alone: $f$ is
# the identity forward and an all-reduce of the gradient backward. At the end, each rank
# holds a partial sum of the output: $g$ all-reduces forward, and backward passes the output's
# gradient (the same on every rank) unchanged to each partial sum, whose slope in the sum is 1.
# $f$ and $g$ are conjugates: each is the other's transpose.
#
# `dist.all_reduce` works in place and is invisible to autograd, so:
#
# - **f**: return a new view of `x` (`x.view_as(x)`, so the hook acts on this use of `x` only,
#   not on a residual connection's) and, if it requires grad, `register_hook` a function that
#   receives the gradient, all-reduces a copy (`grad.clone()`) and returns it: autograd uses
#   what a hook returns in place of the gradient.
# - **g**: all-reduce a detached copy `reduced`, then return `reduced + (x - x.detach())`: the
#   second term is exactly zero, yet its gradient with respect to `x` is the identity, the
#   "straight-through" form.

# %% tags=["solution"]
def copy_to_tensor_parallel(x):
    """f: the identity forward; the gradient all-reduced (summed over the ranks) backward."""
    ### BEGIN SOLUTION
    y = x.view_as(x)
    if y.requires_grad:

        def all_reduce_gradient(grad):
            total = grad.clone()
            dist.all_reduce(total)
            return total

        y.register_hook(all_reduce_gradient)
    return y
    ### END SOLUTION


def reduce_from_tensor_parallel(x):
    """g: the all-reduce (sum over the ranks) forward; the identity backward."""
    ### BEGIN SOLUTION
    reduced = x.detach().clone()
    dist.all_reduce(reduced)
    return reduced + (x - x.detach())
    ### END SOLUTION


# %% tags=["check"]
check("f_and_g")
### BEGIN HIDDEN TESTS
check("f_and_g", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The MLP block
#
# `tp_mlp(x, w1_shard, b1_shard, w2_shard, b2)` = $g(\mathrm{GeLU}(f(x)\,W_{1,r} + b_{1,r})\,W_{2,r}) + b_2$.
# The bias `b2` goes **after** $g$: added before it, on every rank, the sum would hold it $p$
# times.

# %% tags=["solution"]
def tp_mlp(x, w1_shard, b1_shard, w2_shard, b2):
    """The MLP on this rank's shards; the whole output on every rank; one all-reduce forward, one backward."""
    ### BEGIN SOLUTION
    hidden = torch.nn.functional.gelu(copy_to_tensor_parallel(x) @ w1_shard + b1_shard)
    return reduce_from_tensor_parallel(hidden @ w2_shard) + b2
    ### END SOLUTION


# %% [markdown]
# Two ranks against the unsharded MLP, and the collectives each rank posted in each pass:

# %%
def mlp(x, w1, b1, w2, b2):
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2


def show_tp_mlp(world_size, tokens=4, width=8, hidden=16):
    """Run tp_mlp on world_size ranks; print each rank's largest difference from the unsharded MLP and its
    collectives per pass."""

    def on_one_rank():
        rank = dist.get_rank()
        torch.manual_seed(0)
        x, w1, b1 = torch.randn(tokens, width), torch.randn(width, hidden), torch.randn(hidden)
        w2, b2 = torch.randn(hidden, width), torch.randn(width)
        expected = mlp(x, w1, b1, w2, b2)
        shards = [s.clone().requires_grad_() for s in shard_mlp(w1, b1, w2, rank, world_size)]
        with traffic.record(allow_collectives=True) as forward:
            y = tp_mlp(x.clone().requires_grad_(), *shards, b2)
        with traffic.record(allow_collectives=True) as backward:
            y.sum().backward()
        passes = {name: [f"{c.name} of {c.numel} elements" for c in log.collectives]
                  for name, log in (("forward", forward), ("backward", backward))}
        return (y - expected).abs().max().item(), passes

    try:
        for rank, (error, passes) in enumerate(run_ranks(on_one_rank, world_size, timeout=10)):
            print(f"rank {rank}: largest difference {error:.2e}; collectives {passes}")
    except RanksFailed as failure:
        print(failure)


show_tp_mlp(2)

# %% tags=["check"]
check("tp_mlp_forward")
### BEGIN HIDDEN TESTS
check("tp_mlp_forward", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("tp_mlp_backward")
### BEGIN HIDDEN TESTS
check("tp_mlp_backward", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("tp_mlp_collectives")
### BEGIN HIDDEN TESTS
check("tp_mlp_collectives", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Attention, split by heads
#
# Heads are independent until the output projection: rank $r$ computes $Q$, $K$ and $V$ for
# its own heads only (its columns of `wq`, `wk`, `wv`), their attention, and its rows of `wo`,
# a partial sum of the output, exactly like the MLP's second matrix. The same $f$ before and
# $g$ after: one all-reduce forward, one backward. `head_size` is given; this rank's number of
# heads is `wq_shard.shape[1] // head_size`.

# %% tags=["solution"]
def tp_attention(x, wq_shard, wk_shard, wv_shard, wo_shard, bo, head_size, causal):
    """Multi-head attention on this rank's heads: (B, T, C) in, the whole output on every rank."""
    ### BEGIN SOLUTION
    batch, tokens, width = x.shape
    heads = wq_shard.shape[1] // head_size
    x = copy_to_tensor_parallel(x)

    def split(w):
        return (x @ w).reshape(batch, tokens, heads, head_size).transpose(1, 2)

    q, k, v = split(wq_shard), split(wk_shard), split(wv_shard)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_size)
    if causal:
        future = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, tokens, heads * head_size)
    return reduce_from_tensor_parallel(out @ wo_shard) + bo
    ### END SOLUTION


# %% tags=["check"]
check("tp_attention")
### BEGIN HIDDEN TESTS
check("tp_attention", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. On two GPUs
#
# The same MLP over NCCL, one GPU per rank: values and collectives as above. Skipped on a
# machine without two GPUs.

# %% tags=["check"]
check("tp_mlp_nccl")
### BEGIN HIDDEN TESTS
check("tp_mlp_nccl", hidden=True)
### END HIDDEN TESTS
