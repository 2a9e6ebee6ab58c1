# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a ring all-reduce from sends and receives
#
# **You will learn** to write, against the clock, the all-reduce that data-parallel training calls
# after every backward pass, from point-to-point messages only: a **reduce-scatter** then an
# **all-gather** around a ring, each rank sending $2(p-1)$ chunks of about $n/p$ elements, whatever
# the number of ranks $p$. (Chapter 6's exercise builds it in steps; this is the interview version.)
#
# **The conventions, all of them:**
# - `ring_all_reduce(tensor)` runs on each of $p$ processes of one `torch.distributed` process
#   group (gloo, on the CPU); `dist.get_rank()` is this rank $r$, `dist.get_world_size()` is $p$.
#   `tensor` is a contiguous 1-D tensor of $n \ge 0$ elements, of the same size and dtype on every
#   rank (`float32`, `float64` or `int64`). Sum it over the ranks **in place**: afterwards every
#   rank's `tensor` holds the elementwise sum of all ranks' tensors. Return nothing;
# - **chunks**: cut the $n$ elements into $p$ contiguous chunks, chunk $c$ = elements
#   `[start_c, start_(c+1))`, of sizes `n // p`, plus one for each of the first `n % p` chunks (the
#   larger first): $n = 10$, $p = 4$ gives `(0, 3), (3, 6), (6, 8), (8, 10)`. When $n < p$ the last
#   $p - n$ chunks are empty;
# - **the ring**: rank $r$ sends only to $(r + 1) \bmod p$ and receives only from $(r - 1) \bmod p$.
#   Reduce-scatter, steps $s = 0, \dots, p-2$: send chunk $(r - s) \bmod p$, receive chunk
#   $(r - s - 1) \bmod p$ into a separate buffer and add it into your own copy of that chunk. Rank
#   $r$ then holds chunk $(r + 1) \bmod p$ summed over all ranks. All-gather, steps
#   $s = 0, \dots, p-2$: send chunk $(r + 1 - s) \bmod p$ and receive chunk $(r - s) \bmod p$
#   straight into place;
# - **messages**: point-to-point only (`dist.isend`, `dist.irecv`, `dist.batch_isend_irecv`,
#   `dist.send`, `dist.recv`): a collective such as `dist.all_reduce` raises. Each rank sends
#   $2(p-1)$ messages, one chunk each; an empty chunk may be sent as a message of 0 elements or
#   skipped (both sides know it is empty). In each step post the send and the receive **together**
#   (`dist.batch_isend_irecv([dist.P2POp(dist.isend, ...), dist.P2POp(dist.irecv, ...)])`, then
#   `wait()` on each): a blocking `dist.send` before `dist.recv` on every rank deadlocks (gloo's send
#   waits for the matching receive). Wait on every request before returning;
# - **values**: `int64` sums are exact (never through a float); float sums within
#   $2p\,\varepsilon \sum_{ranks} |x|$ of the exact sum ($\varepsilon$ the dtype's machine epsilon).
#
# The checks run your function on 2 and 3 ranks, on tensors of 0 and 1 elements, fewer than $p$, a
# length that $p$ does not divide, a prime and a few thousand elements, in every dtype, compare every
# rank's tensor with the sum, and check every rank's recorded messages: to the successor only, from
# the predecessor only, at most $2(p-1)$ of them of at most $\lceil n/p \rceil$ elements,
# $2(p-1)\,n$ elements sent in all. Your function runs in the grader's processes: plain Python,
# `torch` and `torch.distributed` (no `class`, `with`, `global`, no name starting with `_`).

# %%
import torch
import torch.distributed as dist

from aisys.collectives.launch import RanksFailed, run_ranks
from aisys_grader import checker

check = checker("09-drills/ring_allreduce", globals())


def try_on_ranks(p, n, dtype=torch.float32):
    """Run ring_all_reduce on p ranks, rank r holding 10**r everywhere, and print what each rank holds after."""
    def on_one_rank(tensor):
        ring_all_reduce(tensor)
        return tensor

    try:
        for rank, tensor in enumerate(run_ranks(on_one_rank, p, [(torch.full((n,), 10**r, dtype=dtype),)
                                                                 for r in range(p)], timeout=5)):
            print(f"rank {rank}: {tensor.tolist()}")
    except RanksFailed as failure:
        print(failure)

# %% tags=["solution"]
def ring_all_reduce(tensor):
    """Sum `tensor` over all ranks, in place: a ring reduce-scatter, then a ring all-gather."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    size, larger = divmod(tensor.numel(), p)
    starts = [c * size + min(c, larger) for c in range(p + 1)]  # the first n % p chunks one element larger
    chunks = [tensor[starts[c]:starts[c + 1]] for c in range(p)]  # views: adding into one changes tensor

    def exchange(send, receive):
        """Send to the successor while receiving from the predecessor: both posted, then both waited on."""
        operations = []
        if send.numel():
            operations.append(dist.P2POp(dist.isend, send, (rank + 1) % p))
        if receive.numel():
            operations.append(dist.P2POp(dist.irecv, receive, (rank - 1) % p))
        if operations:
            for work in dist.batch_isend_irecv(operations):
                work.wait()

    buffer = torch.empty_like(chunks[0])
    for step in range(p - 1):  # reduce-scatter: chunk (r + 1) % p ends complete on rank r
        mine = chunks[(rank - step - 1) % p]
        exchange(chunks[(rank - step) % p], buffer[:mine.numel()])
        mine.add_(buffer[:mine.numel()])
    for step in range(p - 1):  # all-gather: the complete chunks go round
        exchange(chunks[(rank + 1 - step) % p], chunks[(rank - step) % p])
    ### END SOLUTION


# %% [markdown]
# To try it, call `try_on_ranks(3, 10)` in a cell of your own: rank $r$ starts with $10^r$ in every
# element, so every element should end as 111.0 on every rank.

# %% tags=["check"]
check("ring_all_reduce")
### BEGIN HIDDEN TESTS
check("ring_all_reduce", hidden=True)
### END HIDDEN TESTS
