# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: all-to-all, and the mixture-of-experts dispatch built on it
#
# **You will learn** how an all-to-all moves a distinct block from every rank to every other
# rank with point-to-point messages, and why the order of those messages matters; then how a
# mixture-of-experts (MoE) layer uses two all-to-alls to send each token to the GPU that holds
# its expert and to bring the result back: sorting tokens by expert, exchanging counts first
# so that every receiver knows how much is coming, dropping the tokens that overflow an
# expert's capacity, and undoing the sort at the end.
#
# Everything runs on real processes: `run_ranks(fn, p, args)` forks $p$ processes joined in
# one `torch.distributed` process group (gloo, on the CPU) and calls `fn(*args[rank])` in
# each. When your work is checked, your functions run the same way, every point-to-point
# message each rank posts is recorded, and a collective call (`dist.all_to_all_single`,
# `dist.all_reduce`, ...) raises: build everything from `dist.isend` and `dist.irecv`. The
# checks you see use 2 to 4 ranks and readable values; the hidden ones use 1 to 4 ranks,
# empty and ragged blocks, several dtypes, ranks with no tokens and every token sent to one
# expert. `aisys.collectives.launch` can be imported when grading; the reference answers
# cannot.
#
# **What is graded where.** The checks of the functions that run on ranks take neither the
# tensors nor the messages from your notebook's processes: the grader takes the source of
# the cells you ran, keeps their imports, `def`s and assignments to names (a later one
# replaces an earlier one; calls, loops and demos are left out), runs them again in a fresh
# process of its own and starts the ranks there, each recording the messages it posts to the
# process group out of your code's reach. Only the ranks' dialect runs there: plain Python
# (arithmetic, indexing and slicing, comprehensions, `if`/`for`/`while`, `try`/`raise`,
# lambdas, f-strings, `def`), imports of `torch`, `torch.distributed`, `numpy`, `math` and
# `functools`, with the point-to-point functions of `torch.distributed` and the tensor
# functions and methods these exercises use; no `class`, `with`, `global` or `yield`, no
# name or attribute starting with `_`, no `getattr`, `eval` or `open`. A collective such as
# `dist.all_reduce` passes the grammar and raises where the messages are recorded. A check
# that needs a definition outside the dialect fails, naming its line, the construct and why:
# in this notebook as when grading.

# %%
import math

import numpy as np
import torch
import torch.distributed as dist

from aisys.collectives.launch import run_ranks
from aisys_grader import checker

check = checker("06-collectives/alltoall_moe", globals())

# %% [markdown]
# ## 1. All-to-all from point-to-point messages
#
# Rank $r$ holds an `input` whose rows (its first axis) are cut into $p$ consecutive blocks,
# `input_splits[q]` rows for rank $q$. After the all-to-all, rank $r$'s `output` holds the
# blocks every rank addressed to it, **in rank order**: first rank 0's block for $r$, then
# rank 1's, and so on, `output_splits[q]` rows from rank $q$. Think of a $p \times p$ matrix
# of blocks, row $a$ being what rank $a$ sends: the all-to-all transposes it. These are the
# semantics of `dist.all_to_all_single(output, input, output_splits, input_splits)`, which
# fills `output` in place. The splits must agree: rank $a$'s `input_splits[b]` is rank $b$'s
# `output_splits[a]`. A block can be empty.
#
# Rank $r$ keeps its own block (a copy, no message) and exchanges the other $p - 1$. Send them
# in the **pairwise-exchange** order: in step $k = 1, \dots, p-1$, rank $r$ sends to
# $(r + k) \bmod p$ and receives from $(r - k) \bmod p$. In every step each rank sends one
# block and receives one, so no rank is swamped. The obvious `for q in range(p)` loop makes
# every rank send to rank 0 first, then all of them to rank 1: one rank receives $p-1$
# messages at once while the others wait. (For $p$ a power of two the XOR order, peer
# $r \oplus k$ in step $k$, works as well; the checks accept either.)
#
# In each step, post the send and the receive with `dist.isend` and `dist.irecv` before you
# wait on either (`request.wait()`): two ranks that both start with a blocking `dist.send` to
# each other wait forever once a message is larger than the transport buffers. Receive
# straight into slices of `output` (`output.split(output_splits)` gives views, and writing a
# view writes `output`). An empty block needs no message; both sides know it is empty.

# %% tags=["solution"]
def all_to_all_single(output, input, output_splits, input_splits):
    """Fill `output` (in place) with the blocks every rank sends this one, in rank order, by isend/irecv."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    sends = input.split(input_splits)
    receives = output.split(output_splits)
    receives[rank].copy_(sends[rank])
    for k in range(1, p):
        send_to, receive_from = (rank + k) % p, (rank - k) % p
        requests = []
        if input_splits[send_to]:
            requests.append(dist.isend(sends[send_to].contiguous(), send_to))
        if output_splits[receive_from]:
            requests.append(dist.irecv(receives[receive_from], receive_from))
        for request in requests:
            request.wait()
    ### END SOLUTION
    return output


# %% [markdown]
# Three ranks, rank $a$ sending `SPLITS[a][b]` rows to rank $b$ (rank 2 sends nothing to
# rank 0): each value reads *sender, receiver, row*, so you can see where it went.

# %%
SPLITS = [[1, 2, 1], [2, 0, 1], [0, 1, 2]]


def show_all_to_all():
    rank, p = dist.get_rank(), dist.get_world_size()
    input_splits, output_splits = SPLITS[rank], [SPLITS[q][rank] for q in range(p)]
    rows = [100 * rank + 10 * q + i for q in range(p) for i in range(input_splits[q])]
    output = torch.full((sum(output_splits),), -1)
    all_to_all_single(output, torch.tensor(rows), output_splits, input_splits)
    return rows, output.tolist()


for rank, (sent, received) in enumerate(run_ranks(show_all_to_all, 3)):
    print(f"rank {rank} sends {sent}, receives {received}")

# %% tags=["check"]
check("all_to_all_single")
### BEGIN HIDDEN TESTS
check("all_to_all_single", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("all_to_all_schedule")
### BEGIN HIDDEN TESTS
check("all_to_all_schedule", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Routing with a capacity
#
# A MoE layer replaces one feed-forward network by $E$ of them, the **experts**, and a
# router that sends each token to one of them (top-1, as in the Switch Transformer, Fedus et
# al. 2021; Mixtral sends each token to two). With **expert parallelism** the experts are
# spread over the $p$ ranks, $E/p$ each: expert $e$ lives on rank $e \,/\!/\, (E/p)$. Each rank
# routes its own batch of $T$ tokens, so it must send each token to the rank of its expert.
#
# First, on each rank, sort the tokens by expert. Experts $0 \dots E/p - 1$ are on rank 0,
# the next $E/p$ on rank 1, and so on, so sorting by expert also groups the tokens by
# destination rank, and the block for rank $q$ is the run of experts $q E/p \dots (q+1)E/p - 1$.
# Use a **stable** sort: tokens of one expert keep their order of arrival.
#
# Switch Transformer gives each expert a fixed **capacity**: of this rank's $T$ tokens, an
# expert takes at most $\lceil T \cdot cf / E \rceil$, where $cf$ is the capacity factor.
# With $cf = 1$ and perfectly balanced routing every expert is exactly full; a popular expert
# takes its first tokens in order of arrival and **drops** the rest. A dropped token gets 0
# from the MoE layer; since the layer sits on a residual connection ($x + \mathrm{MoE}(x)$),
# the token passes through unchanged, as if the layer were not there. `capacity_factor=None`
# means no capacity: nothing is dropped.
#
# Write `route(expert_ids, num_experts, capacity_factor)` for one rank's tokens, `expert_ids`
# being a 1-D integer tensor (a token's expert). Return a dict:
# - `"order"`: the indices of the kept tokens, sorted by expert, in order of arrival within an
#   expert (a 1-D int64 tensor);
# - `"counts"`: the number of kept tokens of each expert ($E$ int64s);
# - `"dropped"`: how many tokens were dropped (an `int`).
#
# `torch.argsort(..., stable=True)`, `torch.bincount(..., minlength=E)` and `torch.cumsum`
# do most of the work.

# %% tags=["solution"]
def route(expert_ids, num_experts, capacity_factor=None):
    """Sort a rank's tokens by expert (stable) and drop the late ones beyond each expert's capacity."""
    expert_ids = torch.as_tensor(expert_ids, dtype=torch.int64)
    ### BEGIN SOLUTION
    order = torch.argsort(expert_ids, stable=True)
    counts = torch.bincount(expert_ids, minlength=num_experts)
    if capacity_factor is None:
        return {"order": order, "counts": counts, "dropped": 0}
    capacity = math.ceil(len(expert_ids) * capacity_factor / num_experts)
    first_of_expert = torch.cumsum(counts, 0) - counts
    place_in_expert = torch.arange(len(expert_ids)) - first_of_expert[expert_ids[order]]
    kept = place_in_expert < capacity
    return {"order": order[kept], "counts": counts.clamp(max=capacity), "dropped": int((~kept).sum())}
    ### END SOLUTION


# %%
routed = route(torch.tensor([2, 0, 2, 1, 0, 2, 3, 2]), 4, capacity_factor=1.0)
print({key: value.tolist() if isinstance(value, torch.Tensor) else value for key, value in routed.items()})

# %% tags=["check"]
check("route")
### BEGIN HIDDEN TESTS
check("route", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Dispatch: two all-to-alls
#
# A rank knows how many tokens it sends to each rank, but not how many it will receive: that
# depends on everyone else's routing. So `dispatch` makes two all-to-alls with your
# `all_to_all_single`:
#
# 1. **The counts.** Each rank sends rank $q$ the $E/p$ counts of its tokens for $q$'s
#    experts (as int64: one row of `counts.reshape(p, E // p)` per destination), and
#    receives, from every rank, how many tokens it will get for each of its own experts.
# 2. **The tokens**, sorted by `route`'s order: the rows for rank $q$ are the kept tokens of
#    $q$'s experts; the splits are the sums of the counts.
#
# Rank $q$ then holds its tokens grouped by source rank and, within a source, by expert (the
# order they were sent in). Return `(received, experts, plan)`:
# - `received`: the rows received, shape (rows, C), in the tokens' dtype;
# - `experts`: the (global) expert id of each received row, int64 (`torch.repeat_interleave`
#   of the expert ids by the counts you received);
# - `plan`: what `combine` will need, a dict `{"order": [...], "send_splits": [...],
#   "recv_splits": [...], "num_tokens": T}`, lists of Python ints (`.tolist()`): route's order,
#   the rows sent to and received from each rank, and this rank's number of tokens.
#
# Only the token rows for rank $q$ may travel to rank $q$: the checks count the elements of
# the tokens' dtype (float32, or float64 in some cases) each rank sends to each other rank.

# %% tags=["solution"]
def dispatch(tokens, expert_ids, num_experts, capacity_factor=None):
    """Send each token (row of tokens (T, C)) to the rank of its expert; (received, experts, plan)."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    local = num_experts // p
    routed = route(expert_ids, num_experts, capacity_factor)
    send_counts = routed["counts"].reshape(p, local)
    recv_counts = torch.empty_like(send_counts)
    all_to_all_single(recv_counts, send_counts, [1] * p, [1] * p)
    send_splits, recv_splits = send_counts.sum(1).tolist(), recv_counts.sum(1).tolist()
    received = tokens.new_empty((sum(recv_splits), tokens.shape[1]))
    all_to_all_single(received, tokens[routed["order"]], recv_splits, send_splits)
    my_experts = torch.arange(rank * local, (rank + 1) * local).repeat(p)
    experts = torch.repeat_interleave(my_experts, recv_counts.reshape(-1))
    plan = {"order": routed["order"].tolist(), "send_splits": send_splits, "recv_splits": recv_splits,
            "num_tokens": len(tokens)}
    ### END SOLUTION
    return received, experts, plan


# %% tags=["check"]
check("dispatch")
### BEGIN HIDDEN TESTS
check("dispatch", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Combine: back home, in order
#
# Each expert rank computes one output row per row it received, in the same order. `combine`
# sends them back with a second all-to-all, the first one reversed: a rank now sends
# `recv_splits` rows and receives `send_splits`. What comes back is in the order the tokens
# were sent, sorted by expert: row $i$ belongs to token `plan["order"][i]`. Put each row back
# at its token's place (the inverse of the sort) and give every dropped token 0. Return the
# output, shape (T, C), in the dtype of `expert_outputs`.

# %% tags=["solution"]
def combine(expert_outputs, plan):
    """Send the expert outputs back and put them in token order: (T, C), 0 for a dropped token."""
    ### BEGIN SOLUTION
    returned = expert_outputs.new_empty((sum(plan["send_splits"]), expert_outputs.shape[1]))
    all_to_all_single(returned, expert_outputs, plan["send_splits"], plan["recv_splits"])
    output = expert_outputs.new_zeros((plan["num_tokens"], expert_outputs.shape[1]))
    output[torch.as_tensor(plan["order"], dtype=torch.int64)] = returned
    ### END SOLUTION
    return output


# %% tags=["check"]
check("combine")
### BEGIN HIDDEN TESTS
check("combine", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. A whole MoE layer
#
# With toy experts, expert $e$ multiplying a token by $e + 1$, here is the layer on 4 ranks
# with 8 experts and 16 tokens per rank, routed with a skew (expert $e$ chosen with
# probability proportional to $1/(e+1)$, as popular experts are in practice), capacity factor
# 1.25. Each rank compares its output with the same computation done token by token in one
# process, and counts the bytes of tokens it sent. Try `capacity_factor=None` and 2.0, and
# watch the number of dropped tokens.

# %%
def moe_forward(tokens, expert_ids, num_experts, capacity_factor=None):
    received, experts, plan = dispatch(tokens, expert_ids, num_experts, capacity_factor)
    outputs = received * (experts[:, None] + 1)  # expert e multiplies by e + 1
    return combine(outputs, plan)


def one_process(tokens, expert_ids, num_experts, capacity_factor):
    """The same layer, token by token: expert e takes its first ⌈T·cf/E⌉ tokens."""
    capacity = len(tokens) if capacity_factor is None else math.ceil(len(tokens) * capacity_factor / num_experts)
    taken, output = [0] * num_experts, torch.zeros_like(tokens)
    for i, e in enumerate(expert_ids.tolist()):
        if taken[e] < capacity:
            taken[e] += 1
            output[i] = tokens[i] * (e + 1)
    return output


def moe_demo(tokens, expert_ids, num_experts, capacity_factor):
    from aisys.collectives import traffic

    with traffic.record() as log:
        output = moe_forward(tokens, expert_ids, num_experts, capacity_factor)
    token_bytes = sum(m.nbytes for m in log.sent() if m.dtype == "float32")
    dropped = int((output == 0).all(dim=1).sum())
    return torch.equal(output, one_process(tokens, expert_ids, num_experts, capacity_factor)), dropped, token_bytes


rng = np.random.default_rng(0)
P, E, T, WIDTH = 4, 8, 16, 4
popularity = 1 / np.arange(1, E + 1)
args = [(torch.tensor(rng.standard_normal((T, WIDTH)), dtype=torch.float32),
         torch.tensor(rng.choice(E, size=T, p=popularity / popularity.sum())), E, 1.25) for _ in range(P)]
for rank, (same, dropped, sent) in enumerate(run_ranks(moe_demo, P, args)):
    print(f"rank {rank}: equals one process: {same}; dropped {dropped} of {T} tokens; sent {sent} bytes of tokens")
