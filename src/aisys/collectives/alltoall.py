"""All-to-all from point-to-point messages, and the mixture-of-experts dispatch and combine built on it.

In an all-to-all each of p ranks holds p blocks, block q bound for rank q, and ends with the
p blocks addressed to it, in rank order: the transpose of the p x p matrix of blocks. Rank r
keeps block r and exchanges the others in p - 1 steps of the **pairwise-exchange** schedule
(Thakur, Rabenseifner & Gropp, IJHPCA 2005): in step k = 1 .. p - 1 it sends to
(r + k) % p and receives from (r - k) % p. Every step is a permutation: each rank sends one
block and receives one, so no link or receiver serves two senders at once. The obvious loop,
`for q in range(p)`, sends every rank's first block to rank 0, then all to rank 1: one receiver
at a time takes p - 1 messages while the rest sit idle. XOR pairing (r ^ k) is the other
contention-free schedule, for p a power of two. Cost: (p - 1)α + (p - 1)/p · nβ for n bytes
per rank, the same volume as an all-gather but with no way to send less: every byte but the
rank's own block has a different destination.

Blocks may differ in size (`all_to_all_single` with splits). A block of 0 rows sends no
message: both sides know its size. They know it because in mixture-of-experts (MoE) the
sizes come from an `exchange_counts` first, itself an all-to-all of one count per pair.

MoE expert parallelism (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021):
E experts live on p ranks, E / p each, expert e on rank e // (E / p). A layer is

    route  ->  dispatch (all-to-all)  ->  experts  ->  combine (all-to-all back)  ->  un-permute

`route` sorts a rank's tokens by expert (stably: ties keep their order of arrival), drops those
beyond an expert's capacity (Switch: ⌈T·k·cf/E⌉ per expert for T tokens, top-k, capacity factor
cf, counted per rank's batch, first come first served), and `dispatch` sends each expert's
tokens to its rank. A dropped token gets 0 from the MoE layer: with the residual connection
around the layer it passes through unchanged. `combine` sends the outputs back and restores
the token order (the inverse of the sort), weighting each of a token's k outputs by its gate.
`moe_dense` is the single-process computation that all of this must equal.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .._validate import positive_int, positive_number

_DTYPES = sorted({d for d in vars(torch).values() if isinstance(d, torch.dtype)}, key=str)


# ---------------------------------------------------------------------------------------------- the schedule


def pairwise_schedule(rank: int, world_size: int) -> list[tuple[int, int]]:
    """(send_to, receive_from) for steps k = 1 .. p - 1: ((r + k) % p, (r - k) % p)."""
    p = positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < p:
        raise ValueError(f"rank must be an integer in [0, {p}), got {rank!r}")
    return [((rank + k) % p, (rank - k) % p) for k in range(1, p)]


def _exchange(send: torch.Tensor, send_to: int, receive: torch.Tensor, receive_from: int) -> None:
    """One step: post the send and the receive together, then wait for both (an empty block: no message).

    batch_isend_irecv posts both before waiting on either; over NCCL it is the one form that
    cannot deadlock when two ranks send to each other in the same step.
    """
    operations = []
    if send.numel():
        operations.append(dist.P2POp(dist.isend, send, send_to))
    if receive.numel():
        operations.append(dist.P2POp(dist.irecv, receive, receive_from))
    if operations:
        for work in dist.batch_isend_irecv(operations):
            work.wait()


def _transpose_blocks(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    """outputs[q] on rank r <- inputs[r] of rank q, by the pairwise-exchange schedule."""
    rank, p = dist.get_rank(), dist.get_world_size()
    outputs[rank].copy_(inputs[rank])  # a rank's own block never leaves it
    for send_to, receive_from in pairwise_schedule(rank, p):
        _exchange(inputs[send_to], send_to, outputs[receive_from], receive_from)


# ---------------------------------------------------------------------------------------------- validation


def _require_tensor(name: str, tensor) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    return tensor


def _splits(name: str, splits, rows: int, p: int, tensor_name: str) -> list[int]:
    """Rows per rank along dim 0: p integers >= 0 summing to `rows`; None splits `rows` evenly."""
    if splits is None:
        if rows % p:
            raise ValueError(f"{name} is None, which splits {tensor_name} evenly, but its {rows} rows (dim 0) "
                             f"do not divide by the world size {p}: give {name}")
        return [rows // p] * p
    if isinstance(splits, torch.Tensor):
        splits = splits.tolist()
    if not isinstance(splits, (list, tuple)) or len(splits) != p or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in splits):
        raise ValueError(f"{name} must be a list of {p} integers >= 0 (rows for each rank), got {splits!r}")
    if sum(splits) != rows:
        raise ValueError(f"{name} must add up to the {rows} rows (dim 0) of {tensor_name}; "
                         f"{list(splits)} adds up to {sum(splits)}")
    return list(splits)


def _describe(output, input, output_splits, input_splits) -> torch.Tensor:
    """What a rank's peers must agree with, as int64s: dtype, elements per row, then both splits."""
    row = math.prod(input.shape[1:])
    return torch.tensor([_DTYPES.index(input.dtype), row, *input_splits, *output_splits],
                        dtype=torch.int64, device=input.device)


def agree_on_splits(output, input, output_splits: list[int], input_splits: list[int]) -> None:
    """Raise the same ValueError on every rank unless what each sends is what its receiver expects.

    Rank a's input_splits[b] must equal rank b's output_splits[a], and all ranks must send rows of
    one dtype and width. Without this, a receiver waits for rows nobody sends (a hang until the
    timeout) or reads the wrong number of bytes. It costs an all-gather of 2p + 2 int64s per
    rank: p - 1 small messages, in the same pairwise schedule as the data.
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    mine = _describe(output, input, output_splits, input_splits)
    table = [mine if q == rank else torch.empty_like(mine) for q in range(p)]
    _transpose_blocks(table, [mine] * p)
    table = torch.stack(table).tolist()
    dtype, width = table[0][0], table[0][1]
    for q, (their_dtype, their_width, *_) in enumerate(table):
        if their_dtype != dtype:
            raise ValueError(f"input must have one dtype on every rank: rank 0 sends {_DTYPES[dtype]}, "
                             f"rank {q} {_DTYPES[their_dtype]}")
        if their_width != width:
            raise ValueError(f"rows (dim 0 of input) must have the same number of elements on every rank: "
                             f"rank 0's have {width}, rank {q}'s {their_width}")
    sends = [row[2:2 + p] for row in table]
    receives = [row[2 + p:] for row in table]
    for a in range(p):
        for b in range(p):
            if sends[a][b] != receives[b][a]:
                raise ValueError(f"splits disagree: rank {a} sends {sends[a][b]} rows to rank {b} "
                                 f"(its input_splits[{b}]), but rank {b} expects {receives[b][a]} "
                                 f"(its output_splits[{a}])")


# ---------------------------------------------------------------------------------------------- all-to-all


def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_splits=None, input_splits=None, *,
                      check_splits: bool = True) -> torch.Tensor:
    """Like dist.all_to_all_single, from point-to-point messages: rank r's input rows are cut by
    input_splits into p blocks, block q goes to rank q, and the blocks received fill `output` in
    rank order, cut by output_splits. None splits evenly. Returns `output`, filled in place.

    `check_splits` first makes every rank agree on the splits (see `agree_on_splits`); without it
    (the bare algorithm, as dispatch uses it with counts it has exchanged), mismatched splits hang.
    """
    _require_tensor("output", output)
    _require_tensor("input", input)
    rank, p = dist.get_rank(), dist.get_world_size()
    if input.dim() == 0 or output.dim() == 0:
        raise ValueError("input and output must have at least one dimension: their rows (dim 0) are split")
    if output.dtype != input.dtype or output.device != input.device or output.shape[1:] != input.shape[1:]:
        raise ValueError(f"output must have input's dtype, device and row shape: input is {input.dtype} "
                         f"{tuple(input.shape)} on {input.device}, output {output.dtype} {tuple(output.shape)} "
                         f"on {output.device}")
    if not output.is_contiguous():
        raise ValueError("output must be contiguous: messages are received into slices of it")
    input_splits = _splits("input_splits", input_splits, input.shape[0], p, "input")
    output_splits = _splits("output_splits", output_splits, output.shape[0], p, "output")
    if check_splits:
        agree_on_splits(output, input, output_splits, input_splits)
    elif input_splits[rank] != output_splits[rank]:
        raise ValueError(f"input_splits[{rank}] must equal output_splits[{rank}] on rank {rank}: it is the block "
                         f"the rank keeps; got {input_splits[rank]} and {output_splits[rank]}")
    _transpose_blocks(list(output.split(output_splits)), list(input.contiguous().split(input_splits)))
    return output


def all_to_all(outputs: list, inputs: list) -> list:
    """Like dist.all_to_all: inputs[q] of rank r arrives in outputs[r] of rank q. Returns `outputs`.

    Each pair of ranks must agree on the size of the block between them (as with torch's).
    """
    p = dist.get_world_size()
    for name, tensors in (("outputs", outputs), ("inputs", inputs)):
        if not isinstance(tensors, (list, tuple)) or len(tensors) != p:
            raise ValueError(f"{name} must be a list of {p} tensors (one per rank), got {type(tensors).__name__}"
                             + (f" of length {len(tensors)}" if hasattr(tensors, "__len__") else ""))
        for q, tensor in enumerate(tensors):
            _require_tensor(f"{name}[{q}]", tensor)
            if not tensor.is_contiguous():
                raise ValueError(f"{name}[{q}] must be contiguous")
    rank = dist.get_rank()
    if outputs[rank].shape != inputs[rank].shape or outputs[rank].dtype != inputs[rank].dtype:
        raise ValueError(f"outputs[{rank}] must have the shape and dtype of inputs[{rank}] on rank {rank} (the block "
                         f"it keeps): got {tuple(outputs[rank].shape)} {outputs[rank].dtype} and "
                         f"{tuple(inputs[rank].shape)} {inputs[rank].dtype}")
    _transpose_blocks(list(outputs), list(inputs))
    return outputs


def exchange_counts(send_counts) -> torch.Tensor:
    """Counts received: row q of the result is row r of rank q's `send_counts` (rank r's own row it keeps).

    `send_counts` has one row per rank (p integers, or a (p, m) integer tensor: m counts per pair).
    An all-to-all of equal blocks, with no check of its own: the sizes of its blocks are known.
    """
    p = dist.get_world_size()
    if not isinstance(send_counts, torch.Tensor):
        send_counts = torch.as_tensor(send_counts, dtype=torch.int64, device=_default_device())
    if send_counts.dim() == 0 or send_counts.shape[0] != p or send_counts.dtype.is_floating_point:
        raise ValueError(f"send_counts must be integers with one row per rank ({p} rows), "
                         f"got {send_counts.dtype} {tuple(send_counts.shape)}")
    received = torch.empty_like(send_counts)
    return all_to_all_single(received, send_counts, check_splits=False)


def _default_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------- routing


def expert_capacity(assignments: int, num_experts: int, capacity_factor: float | None) -> int | None:
    """Switch Transformer's expert capacity ⌈assignments · cf / E⌉ (assignments = tokens x top-k); None: no limit."""
    positive_int("num_experts", num_experts)
    if capacity_factor is None:
        return None
    return math.ceil(assignments * positive_number("capacity_factor", capacity_factor) / num_experts)


def _expert_ids(expert_ids, num_experts: int | None) -> torch.Tensor:
    """(T,) or (T, k) integer expert ids, checked against the range [0, E) unless num_experts is None."""
    expert_ids = torch.as_tensor(expert_ids)
    if expert_ids.dim() not in (1, 2) or expert_ids.dtype.is_floating_point or expert_ids.dtype == torch.bool:
        raise ValueError(f"expert_ids must be integers of shape (T,) for top-1 or (T, k) for top-k, "
                         f"got {expert_ids.dtype} {tuple(expert_ids.shape)}")
    if (num_experts is not None and expert_ids.numel()
            and not (0 <= int(expert_ids.min()) and int(expert_ids.max()) < num_experts)):
        bad = expert_ids[(expert_ids < 0) | (expert_ids >= num_experts)][0]
        raise ValueError(f"expert_ids must lie in [0, num_experts) = [0, {num_experts}); found {int(bad)}")
    return expert_ids.long()


@dataclass(frozen=True)
class Route:
    """One rank's routing: `order` lists the kept assignments (index j·T + i for token i's j-th choice)
    sorted by expert, in order of arrival within an expert; `counts` the kept ones per expert (E,)."""

    order: torch.Tensor
    counts: torch.Tensor
    dropped: int


def route(expert_ids, num_experts: int, capacity_factor: float | None = None) -> Route:
    """Sort a rank's assignments by expert and drop those beyond each expert's capacity.

    `expert_ids` is (T,) for top-1 or (T, k) for top-k. Assignments are taken choice by choice
    (all first choices in token order, then all second choices), so under a capacity a token's
    first choice wins over another's second (GShard's priority), and within one choice the
    earlier token wins (Switch's rule: first come, first served).
    """
    num_experts = positive_int("num_experts", num_experts)
    ids = _expert_ids(expert_ids, num_experts)
    ids = (ids if ids.dim() == 2 else ids[:, None]).T.reshape(-1)  # choice-major: assignment a = j·T + i
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids, minlength=num_experts)
    capacity = expert_capacity(ids.numel(), num_experts, capacity_factor)
    if capacity is None:
        return Route(order, counts, 0)
    first_of_expert = torch.cumsum(counts, 0) - counts
    place_in_expert = torch.arange(ids.numel(), device=ids.device) - first_of_expert[ids[order]]
    kept = place_in_expert < capacity
    return Route(order[kept], counts.clamp(max=capacity), int((~kept).sum()))


def experts_per_rank(num_experts: int, world_size: int) -> int:
    """E / p, with a clear error unless the experts spread evenly."""
    num_experts, world_size = positive_int("num_experts", num_experts), positive_int("world_size", world_size)
    if num_experts % world_size:
        raise ValueError(f"num_experts must be a multiple of the world size to spread the experts evenly: "
                         f"{num_experts} experts on {world_size} ranks")
    return num_experts // world_size


# ---------------------------------------------------------------------------------------------- dispatch, combine


@dataclass(frozen=True)
class Plan:
    """What `combine` needs to bring a rank's expert outputs home: how `dispatch` sorted and split its tokens."""

    num_tokens: int  # T on this rank
    top_k: int
    order: torch.Tensor  # (kept,) assignment indices, in the order sent (see Route)
    send_splits: list[int]  # rows sent to each rank
    recv_splits: list[int]  # rows received from each rank
    dropped: int


def dispatch(tokens: torch.Tensor, expert_ids, num_experts: int,
             capacity_factor: float | None = None) -> tuple[torch.Tensor, torch.Tensor, Plan]:
    """Send each token to the rank of its expert: (received rows, their expert ids, the plan for `combine`).

    tokens (T, C) and expert_ids (T,) or (T, k) are this rank's. The rows received are grouped by
    source rank, and within a source by expert, in order of arrival. Two all-to-alls: the counts
    (E / p integers per pair, with a flag that stops every rank on bad expert_ids), then the tokens.
    """
    tokens = _require_tensor("tokens", tokens)
    p, rank = dist.get_world_size(), dist.get_rank()
    local = experts_per_rank(num_experts, p)
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (T, C), got {tuple(tokens.shape)}")
    ids = _expert_ids(expert_ids, None).to(tokens.device)
    if ids.shape[0] != tokens.shape[0]:
        raise ValueError(f"expert_ids must have one row per token: {ids.shape[0]} rows for {tokens.shape[0]} tokens")
    outside = ids[(ids < 0) | (ids >= num_experts)]
    routed = route(ids if not outside.numel() else ids[:0], num_experts, capacity_factor)
    num_tokens = tokens.shape[0]
    sent_counts = routed.counts.view(p, local)  # (p, E/p): row q for the experts of rank q
    # The counts travel with a flag and the first bad id, so that a bad id on one rank stops every
    # rank with the same error instead of leaving its peers waiting for tokens it never sends.
    flag = torch.tensor([int(outside.numel() > 0), int(outside[0]) if outside.numel() else 0], device=ids.device)
    exchanged = exchange_counts(torch.cat([flag.expand(p, 2), sent_counts], 1))
    for q, (bad, value) in enumerate(exchanged[:, :2].tolist()):
        if bad:
            raise ValueError(f"expert_ids must lie in [0, num_experts) = [0, {num_experts}); rank {q} has {value}")
    received_counts = exchanged[:, 2:]  # (p, E/p): row q from rank q, for my experts
    send_splits, recv_splits = sent_counts.sum(1).tolist(), received_counts.sum(1).tolist()
    received = tokens.new_empty((sum(recv_splits), tokens.shape[1]))
    # assignment a is token a % T (choice a // T): the rows go out in the sorted order.
    all_to_all_single(received, tokens[routed.order % max(num_tokens, 1)], recv_splits, send_splits,
                      check_splits=False)
    my_experts = torch.arange(rank * local, (rank + 1) * local, device=tokens.device).repeat(p)
    experts = torch.repeat_interleave(my_experts, received_counts.reshape(-1))
    top_k = 1 if ids.dim() == 1 else ids.shape[1]
    return received, experts, Plan(num_tokens, top_k, routed.order, send_splits, recv_splits, routed.dropped)


def combine(expert_outputs: torch.Tensor, plan: Plan, gate_weights=None) -> torch.Tensor:
    """Send expert outputs back and put them in token order: (T, C), a dropped assignment adding 0.

    `expert_outputs` has one row per row `dispatch` received, in the same order. With top-k, a
    token's k outputs are summed, weighted by `gate_weights` (T, k) if given.
    """
    _require_tensor("expert_outputs", expert_outputs)
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be the Plan that dispatch returned, got {type(plan).__name__}")
    if expert_outputs.dim() != 2 or expert_outputs.shape[0] != sum(plan.recv_splits):
        raise ValueError(f"expert_outputs must have shape ({sum(plan.recv_splits)}, C), one row per row dispatch "
                         f"received; got {tuple(expert_outputs.shape)}")
    returned = expert_outputs.new_empty((sum(plan.send_splits), expert_outputs.shape[1]))
    all_to_all_single(returned, expert_outputs, plan.send_splits, plan.recv_splits, check_splits=False)
    if gate_weights is not None:
        gate_weights = torch.as_tensor(gate_weights, device=returned.device)
        top_1_as_vector = plan.top_k == 1 and tuple(gate_weights.shape) == (plan.num_tokens,)
        if tuple(gate_weights.shape) != (plan.num_tokens, plan.top_k) and not top_1_as_vector:
            raise ValueError(f"gate_weights must have shape ({plan.num_tokens}, {plan.top_k}), "
                             f"got {tuple(gate_weights.shape)}")
        weight = gate_weights.reshape(plan.num_tokens, plan.top_k).T.reshape(-1)[plan.order]  # per assignment
        returned = returned * weight.to(returned.dtype)[:, None]
    output = returned.new_zeros((plan.num_tokens, returned.shape[1]))
    # The inverse permutation: row i went out as assignment order[i], which belongs to token order[i] % T.
    return output.index_add_(0, plan.order % max(plan.num_tokens, 1), returned)


# ---------------------------------------------------------------------------------------------- the layer


def router(tokens: torch.Tensor, gate_weights: torch.Tensor, top_k: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert_ids (T, k), weights (T, k)): the k largest logits tokens @ gate_weights, and their softmax.

    The weights are the softmax over the chosen k logits, as in Mixtral (for k = 1, weight 1).
    """
    top_k = positive_int("top_k", top_k)
    if gate_weights.dim() != 2 or gate_weights.shape[0] != tokens.shape[-1]:
        raise ValueError(f"gate_weights must have shape (C, E) = ({tokens.shape[-1]}, E), "
                         f"got {tuple(gate_weights.shape)}")
    if top_k > gate_weights.shape[1]:
        raise ValueError(f"top_k must be at most the number of experts {gate_weights.shape[1]}, got {top_k}")
    logits, expert_ids = torch.topk(tokens @ gate_weights, top_k, dim=-1)
    return expert_ids, torch.softmax(logits, dim=-1)


def apply_experts(rows: torch.Tensor, experts: torch.Tensor, expert_weights: torch.Tensor,
                  first_expert: int) -> torch.Tensor:
    """rows @ W[e] for each row's expert e, with W the (E/p, C, C) weights of experts first_expert, ...."""
    output = torch.empty_like(rows)
    for j in range(expert_weights.shape[0]):
        mine = experts == first_expert + j
        output[mine] = rows[mine] @ expert_weights[j]
    return output


def moe_layer(tokens: torch.Tensor, gate_weights: torch.Tensor, expert_weights: torch.Tensor, *,
              top_k: int = 1, capacity_factor: float | None = None) -> torch.Tensor:
    """A mixture-of-experts layer with expert parallelism: this rank's tokens (T, C) in, (T, C) out.

    gate_weights (C, E) is the router, the same on every rank; expert_weights (E/p, C, C) holds
    this rank's experts, expert e being x -> x @ W[e]. Output 0 for a dropped assignment.
    """
    num_experts = gate_weights.shape[1]
    local = experts_per_rank(num_experts, dist.get_world_size())
    if expert_weights.dim() != 3 or expert_weights.shape[0] != local:
        raise ValueError(f"expert_weights must have shape (E/p, C, C) = ({local}, C, C): this rank's experts; "
                         f"got {tuple(expert_weights.shape)}")
    expert_ids, weights = router(tokens, gate_weights, top_k)
    received, experts, plan = dispatch(tokens, expert_ids, num_experts, capacity_factor)
    outputs = apply_experts(received, experts, expert_weights, dist.get_rank() * local)
    return combine(outputs, plan, weights)


def moe_dense(tokens_per_rank: list, gate_weights: torch.Tensor, expert_weights: torch.Tensor, *,
              top_k: int = 1, capacity_factor: float | None = None) -> list[torch.Tensor]:
    """The same layer in one process, token by token: the oracle `moe_layer` on p ranks must equal.

    `tokens_per_rank[r]` is rank r's batch; `expert_weights` (E, C, C) holds every expert. The
    capacity is counted per rank's batch, as on p ranks, by walking its assignments in order.
    """
    num_experts = gate_weights.shape[1]
    outputs = []
    for tokens in tokens_per_rank:
        expert_ids, weights = router(tokens, gate_weights, top_k)
        capacity = expert_capacity(expert_ids.numel(), num_experts, capacity_factor)
        taken = [0] * num_experts
        output = torch.zeros_like(tokens)
        for choice in range(top_k):
            for i in range(tokens.shape[0]):
                e = int(expert_ids[i, choice])
                if capacity is None or taken[e] < capacity:
                    taken[e] += 1
                    output[i] += weights[i, choice] * (tokens[i] @ expert_weights[e])
        outputs.append(output)
    return outputs
