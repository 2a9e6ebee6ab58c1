# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise ★: ring all-reduce on real processes
#
# **You will learn** to build the all-reduce that data-parallel training calls after every
# backward pass out of nothing but point-to-point messages between neighbours: a
# **reduce-scatter** followed by an **all-gather** around a ring (Patarasuk & Yuan, 2009;
# Baidu's 2017 ring all-reduce, which Horovod made popular: Sergeev & Del Balso, 2018). You
# will see why every rank sends only $2(p-1)/p$ of its tensor, whatever the number of ranks
# $p$, and why each step must post its send and its receive together.
#
# **The ring.** The $p$ ranks form a ring: rank $r$ sends only to its successor $(r+1) \bmod p$
# and receives only from its predecessor $(r-1) \bmod p$. The tensor of $n$ elements is cut
# into $p$ chunks. In step $s = 0, \dots, p-2$ of the **reduce-scatter**, rank $r$ sends chunk
# $(r - s) \bmod p$ and receives chunk $(r - s - 1) \bmod p$, which it adds into its own copy of
# that chunk. Each chunk travels once around the ring collecting one rank's contribution per
# step, so after $p - 1$ steps rank $r$ holds chunk $(r + 1) \bmod p$ summed over all ranks.
# In step $s$ of the **all-gather**, rank $r$ sends chunk $(r + 1 - s) \bmod p$, already final,
# and overwrites chunk $(r - s) \bmod p$ with the one it receives: after $p - 1$ more steps every
# rank holds every final chunk.
#
# Each rank sends $2(p-1)$ messages of about $n/p$ elements: $2(p-1)/p \cdot n$ in all, less
# than $2n$ for any $p$, and no all-reduce can send less per rank. That is why NVIDIA's
# nccl-tests define an all-reduce's *bus bandwidth* as its algorithm bandwidth times $2(p-1)/p$:
# it is the rate at which each rank's link carries data.
#
# **Real processes.** Your functions run on $p$ processes joined in a `torch.distributed`
# process group (gloo on this CPU; NCCL on GPUs), started by `run_ranks` from
# `aisys.collectives.launch`. Inside, `dist.get_rank()` and `dist.get_world_size()` say who
# you are. The checks run your functions on 1 to 5 ranks, on tensors of 0, 1, fewer than $p$,
# a prime number and tens of thousands of elements, in float32, float64 and int64, and compare
# the result on *every* rank with the sum of the inputs. They also record every message each
# rank posts (`aisys.collectives.traffic`) and check the ring's pattern: only to the
# successor, only from the predecessor, $p - 1$ messages per phase, the bytes of one chunk
# each. A collective such as `dist.all_reduce` inside your functions raises.
#
# In each function, replace `raise NotImplementedError()` with your code, then run the check
# cell below it. Write the functions yourself: when grading, `aisys.collectives.ring` (the
# reference) cannot be imported; `aisys.collectives.launch` and `aisys.collectives.traffic`
# can.
#
# **What is graded where.** The checks of the functions that run on ranks take neither the
# tensors nor the messages from your notebook's processes: the grader takes the source of
# the cells you ran, keeps their imports, `def`s and assignments to names (a later one
# replaces an earlier one; calls, loops and demos are left out), runs them again in a fresh
# process of its own and starts the ranks there, each recording the messages it posts to the
# process group out of your code's reach. Over NCCL on two GPUs (the last check) the record
# is the same: each message as posted, with its peer, dtype and size, not the bytes NCCL
# moves between the GPUs. Only the ranks' dialect runs there: plain Python (arithmetic,
# indexing and slicing, comprehensions, `if`/`for`/`while`, `try`/`raise`, lambdas,
# f-strings, `def`), imports of `torch`, `torch.distributed`, `numpy`, `math` and
# `functools`, with the point-to-point functions of `torch.distributed` and the tensor
# functions and methods these exercises use; no `class`, `with`, `global` or `yield`, no
# name or attribute starting with `_`, no `getattr`, `eval` or `open`. A collective such as
# `dist.all_reduce` passes the grammar and raises where the messages are recorded. A check
# that needs a definition outside the dialect fails, naming its line, the construct and why:
# in this notebook as when grading.

# %%
import torch
import torch.distributed as dist
from aisys.collectives import traffic
from aisys.collectives.launch import RanksFailed, run_ranks
from aisys_grader import checker

check = checker("06-collectives/ring_allreduce", globals())


def show_on_ranks(function, inputs):
    """Run function(tensor) on len(inputs) ranks; print what each rank holds afterwards, and its messages."""

    def on_one_rank(tensor):
        with traffic.record() as log:
            function(tensor)
        return tensor, log.messages

    try:
        results = run_ranks(on_one_rank, len(inputs), [(x.clone(),) for x in inputs], timeout=5)
    except RanksFailed as failure:
        print(failure)
        return
    for rank, (tensor, messages) in enumerate(results):
        sent = ", ".join(f"{m.numel} to {m.peer}" for m in messages if m.kind == "send") or "nothing"
        print(f"rank {rank} holds {tensor.tolist()}; sent {sent}")


# %% [markdown]
# ## 1. Chunks
#
# Cut $n$ elements into $p$ contiguous chunks whose sizes differ by at most one, **the larger
# ones first**: $n = 10$, $p = 4$ gives `[(0, 3), (3, 6), (6, 8), (8, 10)]`, each a half-open
# range `(start, stop)`. When $n < p$ the last $p - n$ chunks are empty, `(n, n)`: a ring
# must still work on a tensor shorter than the number of ranks (a bias vector on 8 GPUs).

# %% tags=["solution"]
def chunk_bounds(n: int, p: int) -> list[tuple[int, int]]:
    """The p contiguous chunks (start, stop) of n elements: sizes differ by at most 1, the larger first."""
    ### BEGIN SOLUTION
    size, larger = divmod(n, p)
    bounds, start = [], 0
    for c in range(p):
        stop = start + size + (c < larger)
        bounds.append((start, stop))
        start = stop
    return bounds
    ### END SOLUTION


# %% tags=["check"]
check("chunk_bounds")
### BEGIN HIDDEN TESTS
check("chunk_bounds", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Reduce-scatter
#
# **One step, without deadlock.** In every step *every* rank sends and receives at the same
# time. With a blocking `dist.send(chunk, successor)` followed by `dist.recv(buffer,
# predecessor)`, each rank waits in its send for its successor to receive, while the
# successor waits in its own send: a cycle, and nobody ever reaches `recv`. (gloo's send
# waits for the matching receive whatever the size; other transports buffer small messages
# and deadlock only on large ones, which is worse: the bug hides in tests.) Post both first,
# then wait for both:
#
# ```python
# works = dist.batch_isend_irecv([dist.P2POp(dist.isend, chunk, successor),
#                                 dist.P2POp(dist.irecv, buffer, predecessor)])
# for work in works:
#     work.wait()
# ```
#
# Over NCCL, `batch_isend_irecv` is the form to use: it groups the two into one operation. A
# message of zero elements may be sent or skipped (sender and receiver both know the chunk is
# empty), but `batch_isend_irecv` refuses an empty list.
#
# **The steps.** Receive into a separate buffer, then add it into your chunk
# (`chunk.add_(buffer)`): slices of a tensor (`tensor[start:stop]`) are views, so adding into
# one changes the tensor in place. Leave rank $r$ holding chunk $(r + 1) \bmod p$ fully
# reduced; the other chunks hold partial sums (the checks look only at chunk $(r + 1) \bmod p$).
# With one rank there is nothing to do.

# %% tags=["solution"]
def exchange(send: torch.Tensor, receive: torch.Tensor) -> None:
    """Send `send` to the successor while receiving `receive` from the predecessor; both posted before waiting."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    operations = []
    if send.numel():
        operations.append(dist.P2POp(dist.isend, send, (rank + 1) % p))
    if receive.numel():
        operations.append(dist.P2POp(dist.irecv, receive, (rank - 1) % p))
    if operations:
        for work in dist.batch_isend_irecv(operations):
            work.wait()
    ### END SOLUTION


def ring_reduce_scatter(tensor: torch.Tensor) -> None:
    """Sum `tensor` over the ranks in place, so that rank r ends with chunk (r + 1) % p complete."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    bounds = chunk_bounds(tensor.numel(), p)
    chunks = [tensor[start:stop] for start, stop in bounds]
    buffer = torch.empty_like(chunks[0])
    for step in range(p - 1):
        mine = chunks[(rank - step - 1) % p]
        exchange(chunks[(rank - step) % p], buffer[:mine.numel()])
        mine.add_(buffer[:mine.numel()])
    ### END SOLUTION


# %% [markdown]
# Four ranks with 8 elements each: rank $r$ holds $10^r$ everywhere, so every digit of a sum
# says how many ranks' contributions it holds. Chunk 1 (elements 2 and 3) should be complete,
# 1111.0, on rank 0; chunk 2 on rank 1, and so on.

# %%
demo_inputs = [torch.full((8,), 10.0**r) for r in range(4)]
show_on_ranks(ring_reduce_scatter, demo_inputs)

# %% tags=["check"]
check("ring_reduce_scatter")
### BEGIN HIDDEN TESTS
check("ring_reduce_scatter", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. All-gather
#
# Start from the layout your reduce-scatter leaves, chunk $(r + 1) \bmod p$ final on rank
# $r$ (the checks put something else in the other chunks), and pass the final chunks around
# the ring, $p - 1$ steps, so that every rank ends with all of them. Nothing is added now:
# receive straight into the chunk.

# %% tags=["solution"]
def ring_all_gather(tensor: torch.Tensor) -> None:
    """From chunk (r + 1) % p complete on rank r, give every rank every complete chunk, in place."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    chunks = [tensor[start:stop] for start, stop in chunk_bounds(tensor.numel(), p)]
    for step in range(p - 1):
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p])
    ### END SOLUTION


# %%
def reduce_scatter_then_all_gather(tensor):
    ring_reduce_scatter(tensor)
    ring_all_gather(tensor)


show_on_ranks(reduce_scatter_then_all_gather, demo_inputs)

# %% tags=["check"]
check("ring_all_gather")
### BEGIN HIDDEN TESTS
check("ring_all_gather", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. All-reduce
#
# Put the two phases together: `ring_all_reduce(tensor)` sums `tensor` over all ranks, in
# place, with $2(p-1)$ messages per rank. This check is the one that counts: every rank must
# end with the sum, every message must go to the successor, and the bytes each rank sends
# must be those of $2(p-1)$ chunks, not of a root collecting everything. The last check runs
# the same cases on two GPUs over NCCL; it is skipped on a machine without them.

# %% tags=["solution"]
def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: a ring reduce-scatter, then a ring all-gather."""
    ### BEGIN SOLUTION
    ring_reduce_scatter(tensor)
    ring_all_gather(tensor)
    ### END SOLUTION


# %% tags=["check"]
check("ring_all_reduce")
### BEGIN HIDDEN TESTS
check("ring_all_reduce", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ring_all_reduce_nccl")
### BEGIN HIDDEN TESTS
check("ring_all_reduce_nccl", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. What each rank sends
#
# Your ring against the naive all-reduce that sends every tensor to rank 0 and the sum back
# (the root receives $(p-1)\,n$ elements and sends as many): per rank, the ring sends
# $2(p-1)/p \cdot n$ whatever $p$, and no rank does more than the others. Try a larger $p$.

# %%
def bytes_sent_per_rank(function, p, n):
    def on_one_rank():
        with traffic.record() as log:
            function(torch.ones(n))
        return log.bytes_sent()

    return run_ranks(on_one_rank, p)


p, n = 4, 1000
try:
    ring = bytes_sent_per_rank(ring_all_reduce, p, n)
    print(f"ring, p = {p}, n = {n} float32 ({4 * n} bytes): each rank sends {ring} bytes; "
          f"2(p-1)/p * n * 4 = {2 * (p - 1) / p * n * 4:.0f}")
    print(f"gather to rank 0 and send back: rank 0 sends {(p - 1) * n * 4} and receives as many, the others {n * 4}")
except RanksFailed as failure:
    print(failure)
