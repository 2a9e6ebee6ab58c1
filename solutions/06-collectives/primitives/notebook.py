# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 6.1: the eight primitives by hand
#
# **You will learn** exactly what each of the eight collective operations leaves on each
# rank (broadcast, scatter, gather, reduce, all-reduce, all-gather, reduce-scatter and
# all-to-all), in the semantics of `torch.distributed`; that all-reduce can be built from
# two of the others in two ways; and why one of those ways, the parameter server, puts
# $p-1$ times more bytes on one link than the other.
#
# The ranks are simulated in this one process: `buffers` is a list of $p$ numpy arrays,
# `buffers[r]` being rank $r$'s buffer, and each function returns the list of arrays the
# ranks hold *after* the collective. The rules, which are `torch.distributed`'s:
#
# - A **block** is one of $p$ equal parts of a buffer along its first axis (`np.split(x, p)`,
#   `torch.chunk` in torch). Buffers can have more than one axis; blocks are always rows.
# - Results that collect several buffers or blocks **concatenate them in rank order** along
#   the first axis (`np.concatenate`), as `all_gather_into_tensor` does.
# - A rank that receives nothing (every rank but the root in `gather` and `reduce`) **keeps
#   its buffer as it was**. (In `torch.distributed` its buffer is undefined after `reduce`:
#   gloo leaves partial sums in it.)
# - `op` is `"sum"`, `"product"`, `"min"` or `"max"`, the names of `torch.distributed.ReduceOp`
#   in lower case. Reductions keep the buffers' dtype: an `int8` sum wraps around as in torch.
# - Return new arrays; never change the buffers you are given.
#
# The checks you see use a few fixed cases; when your work is graded, hidden checks use
# 1 to 6 ranks, every root, every op, integer and floating-point dtypes, and buffers of one
# and two axes. When grading, `aisys.collectives.simulated` (the reference answers) cannot
# be imported; `aisys.collectives.pictures` can, and draws what your functions do.

# %%
import numpy as np

from aisys.collectives import pictures
from aisys_grader import checker

check = checker("06-collectives/primitives", globals())

# %% [markdown]
# ## 1. The rooted four: broadcast, scatter, gather, reduce
#
# | function | `torch.distributed` | rank $r$ holds after |
# |---|---|---|
# | `broadcast(buffers, root)` | `broadcast(t, src=root)` | a copy of the root's buffer |
# | `scatter(buffers, root)` | `scatter(out, scatter_list, src=root)` | block $r$ of the root's buffer |
# | `gather(buffers, root)` | `gather(t, gather_list, dst=root)` | root: every buffer, in rank order |
# | `reduce(buffers, root, op)` | `reduce(t, dst=root, op=op)` | root: `op` over every buffer |
#
# Scatter does not read the other ranks' buffers. After gather and reduce, every rank but
# the root holds its own buffer, unchanged; `reduce` applies `op` element by element.
#
# A useful fold for the reductions: `np.add(a, b, dtype=a.dtype)` (and `np.multiply`,
# `np.minimum`, `np.maximum`). `np.sum(np.stack(buffers), axis=0)` is shorter but turns
# `int8` and `int32` into `int64`.

# %% tags=["solution"]
OPS = {"sum": np.add, "product": np.multiply, "min": np.minimum, "max": np.maximum}


def broadcast(buffers, root):
    """Every rank gets a copy of the root's buffer."""
    ### BEGIN SOLUTION
    return [buffers[root].copy() for _ in buffers]
    ### END SOLUTION


def scatter(buffers, root):
    """Rank r gets block r of the root's buffer (its first axis cut into p equal blocks)."""
    ### BEGIN SOLUTION
    return [block.copy() for block in np.split(buffers[root], len(buffers))]
    ### END SOLUTION


def gather(buffers, root):
    """The root gets every rank's buffer concatenated in rank order; the other ranks keep their own."""
    ### BEGIN SOLUTION
    return [np.concatenate(buffers) if rank == root else buffer.copy() for rank, buffer in enumerate(buffers)]
    ### END SOLUTION


def reduce(buffers, root, op="sum"):
    """The root gets `op` over every rank's buffer, element by element; the other ranks keep their own."""
    ### BEGIN SOLUTION
    return [combine(buffers, op) if rank == root else buffer.copy() for rank, buffer in enumerate(buffers)]
    ### END SOLUTION


def combine(buffers, op):
    """`op` over the buffers, in rank order, in their dtype (a helper for the reductions)."""
    ### BEGIN SOLUTION
    total = buffers[0].copy()
    for buffer in buffers[1:]:
        total = OPS[op](total, buffer, dtype=buffer.dtype)
    return total
    ### END SOLUTION


# %% tags=["check"]
check("rooted")
### BEGIN HIDDEN TESTS
check("rooted", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. All-reduce
#
# Every rank gets `op` over every rank's buffer: `dist.all_reduce(t, op)`. This is the
# collective of data-parallel training, where each rank computed the gradients of its own
# part of the batch and all of them need the sum.

# %% tags=["solution"]
def all_reduce(buffers, op="sum"):
    """Every rank gets `op` over every rank's buffer, element by element."""
    ### BEGIN SOLUTION
    total = combine(buffers, op)
    return [total.copy() for _ in buffers]
    ### END SOLUTION


# %% tags=["check"]
check("all_reduce")
### BEGIN HIDDEN TESTS
check("all_reduce", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. All-gather and reduce-scatter
#
# `all_gather(buffers)` gives every rank every buffer concatenated **in rank order**
# (`dist.all_gather_into_tensor(out, t)`): rank 0's first, whatever order the data would
# arrive in over a network. `reduce_scatter(buffers, op)` gives rank $r$ block $r$ of the
# reduction (`dist.reduce_scatter_tensor(out, t, op)`). Together they are what ZeRO and
# FSDP do to the parameters (all-gather before use) and to the gradients (reduce-scatter,
# each rank keeping the part it updates).

# %% tags=["solution"]
def all_gather(buffers):
    """Every rank gets every rank's buffer, concatenated in rank order."""
    ### BEGIN SOLUTION
    gathered = np.concatenate(buffers)
    return [gathered.copy() for _ in buffers]
    ### END SOLUTION


def reduce_scatter(buffers, op="sum"):
    """Rank r gets block r of `op` over every rank's buffer."""
    ### BEGIN SOLUTION
    return [block.copy() for block in np.split(combine(buffers, op), len(buffers))]
    ### END SOLUTION


# %% tags=["check"]
check("all_gather_reduce_scatter")
### BEGIN HIDDEN TESTS
check("all_gather_reduce_scatter", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. All-to-all
#
# Rank $r$'s block $j$ goes to rank $j$, where it becomes block $r$
# (`dist.all_to_all_single(out, t)`): if row $r$ of a $p \times p$ table lists rank $r$'s
# blocks, all-to-all transposes the table. A mixture-of-experts layer does this twice per
# step: each rank sends the tokens routed to expert $j$ to the rank that holds expert $j$,
# and the results come back the same way.

# %% tags=["solution"]
def all_to_all(buffers):
    """Rank r's block j goes to rank j, where it becomes block r."""
    ### BEGIN SOLUTION
    p = len(buffers)
    blocks = [np.split(buffer, p) for buffer in buffers]  # blocks[source][destination]
    return [np.concatenate([blocks[source][rank] for source in range(p)]) for rank in range(p)]
    ### END SOLUTION


# %% tags=["check"]
check("all_to_all")
### BEGIN HIDDEN TESTS
check("all_to_all", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your all-to-all on four ranks, drawn from what your function returned: each cell is a
# block, coloured by the rank it came from (`b2 r1` is rank 1's block 2).

# %%
fig = pictures.before_after(all_to_all, world_size=4)

# %% [markdown]
# ## 5. Two ways to build an all-reduce
#
# All-reduce is reduce-scatter followed by all-gather: after the first, rank $r$ holds
# block $r$ of the result; the second hands every block to every rank. It is also reduce
# followed by broadcast: one rank (the *parameter server*) collects the sum and sends it
# back. Write both **with your own functions**.

# %% tags=["solution"]
def all_reduce_via_reduce_scatter(buffers, op="sum"):
    """all_reduce as reduce_scatter then all_gather."""
    ### BEGIN SOLUTION
    return all_gather(reduce_scatter(buffers, op))
    ### END SOLUTION


def all_reduce_via_reduce(buffers, root, op="sum"):
    """all_reduce as reduce to `root` then broadcast from it."""
    ### BEGIN SOLUTION
    return broadcast(reduce(buffers, root, op), root)
    ### END SOLUTION


# %% tags=["check"]
check("identities")
### BEGIN HIDDEN TESTS
check("identities", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. The bytes each way moves
#
# Count the bytes each rank **sends** and **receives** when each of the two compositions is
# done in its plainest form: every piece of data goes straight from the rank that has it to
# the rank that needs it, in one message, and a reduction is done by the rank that receives
# the pieces. Each rank's buffer holds `nbytes` bytes, the root is rank 0, and $p$ divides
# `nbytes`.
#
# - reduce then broadcast: in the reduce every other rank sends its whole buffer to the
#   root; in the broadcast the root sends the whole result to every other rank.
# - reduce-scatter then all-gather: in the reduce-scatter rank $r$ sends its block $j$ to
#   rank $j$ for every $j \ne r$; in the all-gather it sends its reduced block (of
#   `nbytes / p` bytes) to every other rank.
#
# Return `{"reduce_then_broadcast": {"sent": [...], "received": [...]},
# "reduce_scatter_then_all_gather": {"sent": [...], "received": [...]}}`, one number per
# rank in each list.

# %% tags=["solution"]
def composition_traffic(world_size, nbytes):
    """Bytes each rank sends and receives in the two compositions of all_reduce, root 0."""
    ### BEGIN SOLUTION
    p, n = world_size, nbytes
    server = [(p - 1) * n if rank == 0 else n for rank in range(p)]  # root: every other buffer in, the sum out
    ring = [2 * (p - 1) * n / p] * p  # (p - 1) blocks of n / p in each of the two steps
    return {"reduce_then_broadcast": {"sent": server, "received": list(server)},
            "reduce_scatter_then_all_gather": {"sent": ring, "received": list(ring)}}
    ### END SOLUTION


# %% tags=["check"]
check("composition_traffic")
### BEGIN HIDDEN TESTS
check("composition_traffic", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Where does that leave a real machine? With your counts, the time one rank's link needs
# for an all-reduce of 1 GiB of gradients on $p$ GPUs, each with one InfiniBand NDR port
# (400 Gb/s, 50 GB/s each way): the parameter server's link carries $(p-1)$ buffers each
# way, the other composition's $2(p-1)/p$ of one. Only the second stays flat as $p$ grows,
# which is why data-parallel training all-reduces with reduce-scatter + all-gather (the
# ring algorithm of the next exercise) and not through one server.

# %%
link = 50e9  # bytes/s one way: InfiniBand NDR, 400 Gb/s
for p in (2, 8, 64, 512):
    counts = composition_traffic(p, 2**30)
    seconds = {name: max(c["sent"] + c["received"]) / link for name, c in counts.items()}
    print(f"p = {p:3}:  reduce+broadcast {seconds['reduce_then_broadcast']:7.2f} s   "
          f"reduce-scatter+all-gather {seconds['reduce_scatter_then_all_gather']:5.3f} s")
