# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise ★★: ZeRO: sharding AdamW's state, the gradients and the parameters
#
# **You will learn** how ZeRO (Rajbhandari et al., SC 2020) removes data parallelism's
# redundancy: every one of $p$ ranks keeps only $1/p$ of AdamW's state (stage 1), of the
# reduced gradients (stage 2) and of the parameters themselves (stage 3), and still trains
# exactly as unsharded `torch.optim.AdamW` on the whole batch. You will see why stages 1 and 2
# communicate no more than data parallelism, $2\Psi$ per step (a reduce-scatter and an
# all-gather), and why stage 3 needs $3\Psi$ (the parameters are gathered twice).
#
# **Conventions** (the checks rely on every one of them).
#
# - *The flat vector.* The model's parameters, flattened in order and concatenated, are one
#   vector of `numel` elements. It is cut into $p$ contiguous **shards of
#   $s = \lceil \mathit{numel} / p \rceil$ elements**: rank $r$ owns elements
#   $[r s, (r+1) s)$. The vector is padded with zeros at its end up to $p s$ elements, so
#   every shard, the last one too, is $s$ long (as FSDP's FlatParameter and DeepSpeed do). So
#   `shard_bounds(numel, p)` gives rank $r$'s elements of the *unpadded* vector,
#   `(min(r*s, numel), min((r+1)*s, numel))`: with 58 elements on 4 ranks, $s = 15$ and the
#   bounds are `[(0, 15), (15, 30), (30, 45), (45, 58)]` (the last shard has 2 elements of
#   padding); with 3 elements on 4 ranks, $s = 1$ and the last rank's shard is `(3, 3)`, all
#   padding.
# - *A rank's state* is a dict (the ranks' dialect has no classes). `init_state(params, stage)`
#   makes it from the full initial parameters (a list of float64 tensors, the same on every
#   rank) with at least these keys: `"stage"` (1, 2 or 3), `"shard"` (the rank's $s$ elements
#   of the padded flat vector: its parameters), `"exp_avg"` and `"exp_avg_sq"` (AdamW's
#   moments, zeros of length $s$), `"step"` (0). Stages 1 and 2 also keep `"params"`, the
#   full parameters (a list of tensors of the given shapes), which every rank holds. Keep
#   what else you need in it, but **no tensor in the state may hold more than $s$ elements,
#   except `"params"` in stages 1 and 2**: the checks read the size of every tensor in it,
#   counted by the storage it keeps alive (a slice of a full-length vector counts as all of
#   it). And keep nothing between calls outside the state: a module-level value or a default
#   argument that your functions change is found, and counts as memory the rank holds.
# - *A step*, as the grader's training loop calls your functions:
#   `weights = gather_parameters(state)`, forward; (stage 3: drop them and
#   `weights = gather_parameters(state)` again) forward and backward, which gives
#   `grads = torch.autograd.grad(loss, weights)`, this rank's local gradients (of the mean
#   loss over its own rows of the batch; every rank has as many rows);
#   `reduce_gradients(state, grads)`, after which the loop drops `grads` and `weights`;
#   `adamw_step(state, lr, betas, eps, weight_decay)`.
# - `gather_parameters(state)` returns the full parameters as a list of tensors of the
#   parameters' shapes that require a gradient. Stages 1 and 2: the tensors of
#   `state["params"]` themselves, no communication. Stage 3: one all-gather of the shards
#   (`dist.all_gather_into_tensor`), into fresh tensors that nothing in the state keeps.
# - `reduce_gradients(state, grads)` reduce-scatters the local gradients (one
#   `dist.reduce_scatter_tensor` of the padded flat gradient, a sum), divides by $p$ (the
#   mean over the ranks is the whole batch's gradient; gloo has no `ReduceOp.AVG`) and stores
#   the rank's shard, $s$ elements, as `state["grad"]`. Stages 2 and 3 keep nothing else of
#   the gradients; stage 1 may flatten them into its `"grad_buffer"`.
# - `adamw_step(state, lr, betas, eps, weight_decay)` updates `state["shard"]` with AdamW
#   exactly as `torch.optim.AdamW` does (decoupled weight decay; bias correction, the step
#   counted from 1) from `state["grad"]`, removes `state["grad"]`, and in stages 1 and 2
#   all-gathers the updated shards into `state["params"]` (in place).
# - *Communication* per step and rank: stages 1 and 2, one reduce-scatter and one all-gather
#   of $p s$ elements each; stage 3, two all-gathers and one reduce-scatter. No other
#   collective, no point-to-point message.
#
# **What is checked.** The grader trains a two-layer model (parameters of 7×5, 5, 5×3 and 3
# elements, float64) for three steps on 2, 3 and 4 ranks in each stage, and compares every
# rank's parameters, and the shards put together with their padding, with unsharded
# `torch.optim.AdamW` on the whole batch; the first step's `state["grad"]` with the whole
# batch's gradient; the size of every tensor in the state after the forward pass, after
# the reduction and after the step; the gradient elements the rank still holds after
# `reduce_gradients` (the state's tensors whose key says `grad`; stages 2 and 3: at most
# $s$); and the collectives each step posts, their kinds, order and sizes, against $2\Psi$
# and $3\Psi$. The hidden runs add models of random widths and AdamW settings. The last
# check runs the same on two GPUs over NCCL.
#
# **What is graded where.** As in chapter 6's ring all-reduce: the grader keeps the `def`s,
# imports and assignments of the cells you ran, runs them in a fresh process of its own and
# starts the ranks there; a trusted training loop (`aisys.parallel.harness.zero`) calls your
# functions and records the collectives out of your code's reach. Only the ranks' dialect
# runs there: plain Python, `torch`, `torch.distributed`, `math`; no `class`, `with` or
# names starting with `_`.

# %%
import math

import torch
import torch.distributed as dist
from aisys.collectives.launch import run_ranks
from aisys.parallel.harness import zero as zero_harness
from aisys_grader import checker

check = checker("05-parallel-training/zero", globals())


# %% [markdown]
# ## 1. Shards
#
# Every rank's shard is $s = \lceil \mathit{numel}/p \rceil$ long; the bounds are its part of
# the unpadded vector (see the conventions above). Unlike the ring all-reduce's chunks, whose
# sizes differ by one, equal shards let one `all_gather_into_tensor` put every rank's piece
# at $r s$ in one buffer: the padding all sits at the end.

# %% tags=["solution"]
def shard_bounds(numel: int, p: int) -> list[tuple[int, int]]:
    """Rank r's elements [start, stop) of the unpadded flat vector: [r·s, (r+1)·s) clipped to numel, s = ceil."""
    ### BEGIN SOLUTION
    size = -(-numel // p)
    return [(min(r * size, numel), min((r + 1) * size, numel)) for r in range(p)]
    ### END SOLUTION


# %% tags=["check"]
check("shard_bounds")
### BEGIN HIDDEN TESTS
check("shard_bounds", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The state, the gathered parameters and the reduced gradients
#
# `flatten_padded` is given the tensors of one rank and returns the padded flat vector of
# $p s$ elements: each rank's part (from `shard_bounds`) followed by zeros up to $s$.
# `unflatten` cuts the parameters back out of a gathered vector. `init_state` keeps the
# rank's shard of the initial parameters (a copy) and zero moments of the same length.

# %% tags=["solution"]
def flatten_padded(tensors: list, p: int) -> torch.Tensor:
    """The tensors flattened, concatenated and padded with zeros: p shards of ceil(numel / p) elements."""
    ### BEGIN SOLUTION
    flat = torch.cat([t.reshape(-1) for t in tensors])
    bounds = shard_bounds(flat.numel(), p)
    size = bounds[0][1] - bounds[0][0]
    pieces = []
    for start, stop in bounds:
        pieces.append(flat[start:stop])
        pieces.append(flat.new_zeros(size - (stop - start)))
    return torch.cat(pieces)
    ### END SOLUTION


def unflatten(flat: torch.Tensor, shapes: list) -> list:
    """The parameters cut out of a gathered flat vector, in order, with the given shapes."""
    ### BEGIN SOLUTION
    tensors, start = [], 0
    for shape in shapes:
        count = math.prod(shape)
        tensors.append(flat[start:start + count].reshape(shape))
        start += count
    return tensors
    ### END SOLUTION


def init_state(params: list, stage: int) -> dict:
    """This rank's state: its shard of the padded flat parameters, zero moments of the shard's length, step 0;
    stages 1 and 2 also keep a copy of the full parameters."""
    ### BEGIN SOLUTION
    p, rank = dist.get_world_size(), dist.get_rank()
    flat = flatten_padded([t.detach() for t in params], p)
    size = flat.numel() // p
    shard = flat[rank * size:(rank + 1) * size].clone()
    state = {"stage": stage, "shapes": [list(t.shape) for t in params], "shard": shard,
             "exp_avg": torch.zeros_like(shard), "exp_avg_sq": torch.zeros_like(shard), "step": 0}
    if stage < 3:
        state["params"] = [t.detach().clone() for t in params]
    return state
    ### END SOLUTION


def gather_parameters(state: dict) -> list:
    """The full parameters for a pass, requiring a gradient: stages 1-2 those kept; stage 3 all-gathered."""
    ### BEGIN SOLUTION
    if state["stage"] < 3:
        return [t.requires_grad_() for t in state["params"]]
    shard = state["shard"]
    full = shard.new_empty(shard.numel() * dist.get_world_size())
    dist.all_gather_into_tensor(full, shard)
    return [t.requires_grad_() for t in unflatten(full, state["shapes"])]
    ### END SOLUTION


def reduce_gradients(state: dict, grads: list) -> None:
    """Reduce-scatter the local gradients, averaged over the ranks, into state["grad"] (one shard); stage 1 keeps
    a full flat gradient buffer in state["grad_buffer"], stages 2 and 3 nothing of the full gradients."""
    ### BEGIN SOLUTION
    p = dist.get_world_size()
    flat = flatten_padded(grads, p)
    if state["stage"] == 1:
        buffer = state.setdefault("grad_buffer", torch.zeros_like(flat))
        flat = buffer.copy_(flat)
    mine = flat.new_empty(flat.numel() // p)
    dist.reduce_scatter_tensor(mine, flat)
    state["grad"] = mine.div_(p)
    ### END SOLUTION


# %% [markdown]
# ## 3. AdamW on the shard, and a training step
#
# `torch.optim.AdamW` (Loshchilov & Hutter, ICLR 2019) with step $t$ counted from 1, gradient
# $g$, learning rate $\eta$ and weight decay $\lambda$:
#
# $$\theta \leftarrow \theta (1 - \eta\lambda),\quad m \leftarrow \beta_1 m + (1-\beta_1) g,\quad
# v \leftarrow \beta_2 v + (1-\beta_2) g^2,$$
# $$\theta \leftarrow \theta - \frac{\eta}{1-\beta_1^t}\,
#   \frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}.$$
#
# The decay multiplies the parameter; it is not added to the gradient (that is Adam's L2,
# which the moments would then rescale). Elementwise, so a shard updates on its own.

# %% tags=["solution"]
def adamw_step(state: dict, lr: float, betas: tuple, eps: float, weight_decay: float) -> None:
    """AdamW on this rank's shard from state["grad"] (removed after); stages 1-2 all-gather the new parameters."""
    ### BEGIN SOLUTION
    beta1, beta2 = betas
    state["step"] += 1
    step = state["step"]
    grad, shard = state.pop("grad"), state["shard"]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    shard.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
    shard.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))
    if state["stage"] < 3:
        full = shard.new_empty(shard.numel() * dist.get_world_size())
        dist.all_gather_into_tensor(full, shard)
        for param, value in zip(state["params"], unflatten(full, state["shapes"])):
            param.detach().copy_(value)
    ### END SOLUTION


# %% [markdown]
# Train for three steps on four ranks, stage 3, as the grader's loop does, and print what
# rank 0 holds: its state's tensors are shard-sized, and each step posts two all-gathers and
# a reduce-scatter of $p s = 60$ elements (58 parameters and 2 of padding).

# %%
def zero_demo(stage):
    hyper = {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1}
    definitions = {"init_state": init_state, "gather_parameters": gather_parameters,
                   "reduce_gradients": reduce_gradients, "adamw_step": adamw_step}
    return run_ranks(zero_harness.train, 4, [(definitions, stage, 0, (7, 5, 3), 12, 3, hyper)] * 4, timeout=10)


try:
    rank0 = zero_demo(3)[0]
    print("state after the last step:", rank0["sizes"]["step 3"])
    print("step 1:", [e.get("name") or e.get("mark") for e in rank0["steps"][0]])
    print("sizes:", [e["numel"] for e in rank0["steps"][0] if "numel" in e])
except Exception as error:  # a function not written yet
    print(type(error).__name__, str(error)[:300])

# %% tags=["check"]
check("zero_training")
### BEGIN HIDDEN TESTS
check("zero_training", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("zero_memory")
### BEGIN HIDDEN TESTS
check("zero_memory", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("zero_communication")
### BEGIN HIDDEN TESTS
check("zero_communication", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. On two GPUs
#
# The same three stages over NCCL, one GPU per rank: the tensors arrive on each rank's GPU,
# so create new tensors with `new_empty`, `new_zeros` or `zeros_like` (on the device of the
# tensor they come from), never on the CPU.

# %% tags=["check"]
check("zero_nccl")
### BEGIN HIDDEN TESTS
check("zero_nccl", hidden=True)
### END HIDDEN TESTS
