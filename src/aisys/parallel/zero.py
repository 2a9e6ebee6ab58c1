"""ZeRO stages 1, 2 and 3 with AdamW, as functions over one rank's state (a dict).

Rajbhandari, Rasley, Ruwase and He, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", SC 2020: section 5 (what each stage partitions) and section 7 (its
communication). The model's parameters are seen as one flat vector of numel elements, cut into
p contiguous shards of ceil(numel / p) elements, the last padded with zeros so that every rank's
shard has the same length (as FSDP's FlatParameter and DeepSpeed do): rank r owns elements
[r·s, (r+1)·s) of the padded vector. Per training step, on every rank:

- stage 1 (P_os): the optimizer state (AdamW's exp_avg, exp_avg_sq, the parameters' shard) is
  partitioned. The local gradients are reduce-scattered (summed, then divided by p: the
  whole batch's mean), the rank updates its shard only, and an all-gather brings every rank's
  updated shard back into the full parameters, which every rank keeps. A full gradient buffer
  stays allocated (stage 1 does not partition gradients).
- stage 2 (P_os+g): the same, but the rank keeps only its shard of the reduced gradient:
  nothing of the full gradients outlives the reduce-scatter.
- stage 3 (P_os+g+p): the parameters are partitioned too. Before the forward pass the rank
  all-gathers the full parameters and frees them after it; before the backward pass it
  all-gathers them again; it keeps only its shard between steps and updates it in place.

Communication per step and rank, in elements of the (padded) flat vector Ψ: a reduce-scatter
(Ψ) and an all-gather (Ψ) for stages 1 and 2, 2Ψ as for data parallelism's all-reduce; two
all-gathers and a reduce-scatter, 3Ψ, for stage 3 (section 7.2).

The optimizer is torch.optim.AdamW's update (Loshchilov and Hutter, "Decoupled Weight Decay
Regularization", ICLR 2019): decoupled weight decay, bias-corrected moments.
"""

import math

import torch
import torch.distributed as dist

from aisys._validate import nonnegative_int, nonnegative_number, one_of, positive_int, positive_number

STAGES = (1, 2, 3)
K_ADAM = 12  # bytes of optimizer state per parameter with mixed-precision Adam: fp32 parameters, momentum, variance


# ---------------------------------------------------------------------------------------------- the flat vector


def shard_size(numel: int, p: int) -> int:
    """Elements of every rank's shard: ceil(numel / p), the last shard padded up to it."""
    numel, p = nonnegative_int("numel", numel), positive_int("p", p)
    return -(-numel // p)


def shard_bounds(numel: int, p: int) -> list[tuple[int, int]]:
    """Rank r's elements [start, stop) of the unpadded flat vector: [r·s, (r+1)·s) clipped to numel.

    The shards have s = ceil(numel / p) elements each except where the vector ends: the last
    non-empty one may be shorter (its padding makes it s long) and, when numel < p·s leaves
    nothing, the last ranks' are empty (numel, numel).
    """
    size = shard_size(numel, p)
    return [(min(r * size, numel), min((r + 1) * size, numel)) for r in range(p)]


def flatten_padded(tensors: list, p: int) -> torch.Tensor:
    """The tensors flattened and concatenated, with zeros appended up to p·ceil(numel / p)."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    padding = shard_size(flat.numel(), p) * p - flat.numel()
    return torch.cat([flat, flat.new_zeros(padding)])


def unflatten(flat: torch.Tensor, shapes: list) -> list:
    """Views of `flat`'s first elements with the given shapes, in order (the padding after them is ignored)."""
    views, start = [], 0
    for shape in shapes:
        count = math.prod(shape)
        views.append(flat[start:start + count].view(*shape))
        start += count
    return views


# ---------------------------------------------------------------------------------------------- AdamW


def adamw_update(param, grad, exp_avg, exp_avg_sq, step: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
    """One AdamW step in place on `param` (any tensor: here a shard), exactly as torch.optim.AdamW computes it.

    The weight decay is decoupled (param ← param·(1 - lr·λ), not added to the gradient as L2 is
    in Adam), and both moments are bias-corrected by 1 - β^step, `step` counting from 1.
    """
    step = positive_int("step", step)
    lr, eps = nonnegative_number("lr", lr), positive_number("eps", eps)
    weight_decay = nonnegative_number("weight_decay", weight_decay)
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1 ** step)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


# ---------------------------------------------------------------------------------------------- a rank's state


def init_state(params: list, stage: int) -> dict:
    """This rank's state before the first step, from the full initial parameters (the same on every rank).

    "shard": the rank's elements of the padded flat vector (a copy); "exp_avg", "exp_avg_sq":
    zeros of the shard's length; "step": 0; "shapes": the parameters' shapes; "stage". Stages 1
    and 2 also keep "params", the full parameters every rank holds (a copy of them).
    """
    stage = one_of("stage", stage, STAGES)
    p, rank = dist.get_world_size(), dist.get_rank()
    flat = flatten_padded([t.detach() for t in params], p)
    size = flat.numel() // p
    shard = flat[rank * size:(rank + 1) * size].clone()
    state = {"stage": stage, "shapes": [list(t.shape) for t in params], "shard": shard,
             "exp_avg": torch.zeros_like(shard), "exp_avg_sq": torch.zeros_like(shard), "step": 0}
    if stage < 3:
        state["params"] = [t.detach().clone() for t in params]
    return state


def all_gather_shards(shard: torch.Tensor) -> torch.Tensor:
    """Every rank's shard, concatenated in rank order: the padded flat vector (one all-gather of p·s elements)."""
    full = shard.new_empty(shard.numel() * dist.get_world_size())
    dist.all_gather_into_tensor(full, shard)
    return full


def gather_parameters(state: dict) -> list:
    """The full parameters for a forward or backward pass, as leaf tensors that require a gradient.

    Stages 1 and 2 return the parameters the rank keeps ("params"); stage 3 all-gathers them
    from the shards into fresh tensors, which the caller drops after the pass (nothing of
    them stays in `state`).
    """
    if state["stage"] < 3:
        return [t.requires_grad_() for t in state["params"]]
    return [t.requires_grad_() for t in unflatten(all_gather_shards(state["shard"]), state["shapes"])]


def reduce_gradients(state: dict, grads: list) -> None:
    """Reduce-scatter this rank's local gradients (one per parameter), averaged over the ranks, into
    state["grad"], the rank's shard.

    Stage 1, which does not partition gradients, keeps a full flat gradient buffer of p·s
    elements in state["grad_buffer"] and reuses it every step (as DeepSpeed's stage 1 keeps
    its full gradients); stages 2 and 3 keep nothing of the full gradients.
    """
    p = dist.get_world_size()
    flat = flatten_padded(grads, p)
    if state["stage"] == 1:
        buffer = state.setdefault("grad_buffer", torch.zeros_like(flat))
        flat = buffer.copy_(flat)
    mine = flat.new_empty(flat.numel() // p)
    dist.reduce_scatter_tensor(mine, flat)  # a sum: gloo has no ReduceOp.AVG
    state["grad"] = mine.div_(p)


def adamw_step(state: dict, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> None:
    """Update this rank's shard with AdamW from state["grad"], then free that gradient shard; stages 1 and 2
    all-gather the updated shards into the full parameters every rank keeps."""
    state["step"] += 1
    adamw_update(state["shard"], state.pop("grad"), state["exp_avg"], state["exp_avg_sq"], state["step"], lr, betas,
                 eps, weight_decay)
    if state["stage"] < 3:
        full = all_gather_shards(state["shard"])
        for param, value in zip(state["params"], unflatten(full, state["shapes"])):
            param.detach().copy_(value)


# ---------------------------------------------------------------------------------------------- the formulas


def communication_per_step(numel: int, p: int, stage: int) -> dict:
    """Elements of the padded flat vector each collective of one step moves, as the recorder counts them (an
    all-gather's whole output, a reduce-scatter's whole input), by name, and their total (the paper's 2Ψ or 3Ψ)."""
    stage = one_of("stage", stage, STAGES)
    padded = shard_size(numel, p) * p
    gathers = 2 if stage == 3 else 1
    return {"reduce_scatter_tensor": padded, "all_gather_into_tensor": gathers * padded,
            "total": (1 + gathers) * padded}


def memory_per_gpu(psi: float, n: int, stage: int, k: float = K_ADAM, parameter_bytes: float = 2,
                   gradient_bytes: float = 2) -> float:
    """Bytes of model states per GPU for Ψ parameters on N data-parallel GPUs (ZeRO, Figure 1): with 2 bytes of
    fp16 parameters and 2 of fp16 gradients per parameter and K of optimizer state, stage 0 (plain data
    parallelism) (2 + 2 + K)Ψ, stage 1 (2 + 2)Ψ + KΨ/N, stage 2 2Ψ + (2 + K)Ψ/N, stage 3 (2 + 2 + K)Ψ/N.
    Training in fp32 with Adam: parameter_bytes = gradient_bytes = 4 and K = 8 (the moments only)."""
    psi, n = nonnegative_number("psi", psi), positive_int("n", n)
    stage = one_of("stage", stage, (0, *STAGES))
    k = nonnegative_number("k", k)
    parameters = nonnegative_number("parameter_bytes", parameter_bytes) * psi
    gradients = nonnegative_number("gradient_bytes", gradient_bytes) * psi
    optimizer = k * psi
    if stage >= 1:
        optimizer /= n
    if stage >= 2:
        gradients /= n
    if stage >= 3:
        parameters /= n
    return parameters + gradients + optimizer
