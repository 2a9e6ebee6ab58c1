# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: all-reduce in log p rounds, and choosing by size
#
# **You will learn** two all-reduce algorithms whose number of rounds grows as $\log_2 p$
# rather than $p$: **recursive doubling**, where every rank swaps its whole tensor with a
# partner $\log_2 p$ times, and the **binomial tree**, which sums towards rank 0 and sends the
# result back down; how a world size that is not a power of two is folded into one that is
# (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
# MPICH", IJHPCA 2005, section 4); and how the α-β cost model picks between recursive doubling
# and the ring by message size, as NCCL and MPI libraries do.
#
# **The cost model.** A message of $n$ bytes costs $\alpha + n\beta$: $\alpha$ is the fixed cost
# of one message (software, synchronisation, link latency: a few µs between GPUs), $\beta$ the
# time per byte (1 / the link's one-way bandwidth: $1/(450\ \text{GB/s})$ over NVLink 4 on an
# H100, $1/(50\ \text{GB/s})$ over one InfiniBand NDR port). For an all-reduce of $n$ bytes on
# $p$ ranks (Thakur et al. 2005):
#
# | algorithm | rounds ($\times\alpha$) | bytes on the critical path ($\times\beta$) |
# | --- | --- | --- |
# | ring (reduce-scatter + all-gather) | $2(p-1)$ | $2\frac{p-1}{p}\,n$ |
# | recursive doubling, $p$ a power of two | $\log_2 p$ | $\log_2 p \cdot n$ |
# | recursive doubling, other $p$ | $\lfloor\log_2 p\rfloor + 2$ | $(\lfloor\log_2 p\rfloor + 2)\, n$ |
# | binomial tree (reduce + broadcast) | $2\lceil\log_2 p\rceil$ | $2\lceil\log_2 p\rceil\, n$ |
#
# The ring moves the fewest bytes, but in $2(p-1)$ rounds; recursive doubling moves the whole
# tensor every round, but in only $\log_2 p$ of them. Small messages are latency-bound and
# want few rounds; large ones are bandwidth-bound and want few bytes.
#
# **Real processes.** Your functions run on $p$ processes joined in a `torch.distributed`
# process group (gloo on this CPU), started by `run_ranks` from `aisys.collectives.launch`.
# Inside, `dist.get_rank()` and `dist.get_world_size()` say who you are. Use point-to-point
# messages only (`dist.send`, `dist.recv`, `dist.isend`, `dist.irecv`,
# `dist.batch_isend_irecv`): the checks record every message each rank posts
# (`aisys.collectives.traffic`) and a collective such as `dist.all_reduce` raises. They run
# your functions on 1 to 8 ranks, on tensors of 0, 1, a prime number of elements and a
# matrix, in int32, int64, float16, float32 and float64, compare every rank's tensor with the
# sum of the inputs, then check the pattern of messages of the algorithm.
#
# In each function, replace `raise NotImplementedError()` with your code, then run the check
# cell below it. Write the functions yourself: when grading, `aisys.collectives.tree` and
# `aisys.collectives.cost` (the reference answers) cannot be imported;
# `aisys.collectives.launch` and `aisys.collectives.traffic` can.
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
import torch
import torch.distributed as dist
from aisys.collectives import traffic
from aisys.collectives.launch import RanksFailed, run_ranks
from aisys_grader import checker

check = checker("06-collectives/tree_allreduce", globals())


def show_on_ranks(function, p, *args):
    """Run function(tensor, *args) on p ranks, rank r holding [r + 1, 10(r + 1)]; print each rank's result and
    messages."""

    def on_one_rank():
        tensor = torch.tensor([1.0, 10.0]) * (dist.get_rank() + 1)
        with traffic.record() as log:
            function(tensor, *args)
        return tensor, log.messages

    try:
        results = run_ranks(on_one_rank, p, timeout=5)
    except RanksFailed as failure:
        print(failure)
        return
    for rank, (tensor, messages) in enumerate(results):
        sent = ", ".join(str(m.peer) for m in messages if m.kind == "send") or "nobody"
        received = ", ".join(str(m.peer) for m in messages if m.kind == "recv") or "nobody"
        print(f"rank {rank} holds {tensor.tolist()}; sent to {sent}; received from {received}")


# %% [markdown]
# ## 1. Recursive doubling on a power of two
#
# Number the ranks of a group $0 \dots p-1$ by their position in it, $p$ a power of two. In
# round $k = 0, 1, \dots, \log_2 p - 1$, the rank at position $r$ and the one at position
# $r \oplus 2^k$ (XOR: $r$ with bit $k$ flipped) swap their whole tensors and each adds what it
# received to its own. After round 0, pairs $\{0, 1\}, \{2, 3\}, \dots$ hold the sum of the pair;
# after round 1, blocks of four; after round $k$, blocks of $2^{k+1}$, and so, after
# $\log_2 p$ rounds, every rank holds the sum of all. Both partners add the same two numbers,
# so every rank ends with exactly the same result (addition is commutative, even in floating
# point).
#
# Write `recursive_doubling(tensor, group)`: `group` lists the global ranks taking part (the
# checks pass `list(range(p))` and, hidden, shuffled orders), the rank at `group[i]` having
# position $i$; each rank of the group calls it with its own tensor, which it sums **in
# place** (receive into a separate buffer, then `tensor += buffer`). Both partners send in the
# same round, so post the send and the receive together and then wait for both:
#
# ```python
# works = dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, peer),
#                                 dist.P2POp(dist.irecv, buffer, peer)])
# for work in works:
#     work.wait()
# ```
#
# (a blocking `dist.send` on both sides waits for a receive that neither has posted: a
# deadlock). Send to and receive from the partner in round order, $k = 0$ first.

# %% tags=["solution"]
def recursive_doubling(tensor: torch.Tensor, group: list[int]) -> None:
    """Sum `tensor` over the ranks of `group` (a power of two of them) in place: in round k, swap with position
    r XOR 2^k."""
    ### BEGIN SOLUTION
    me, buffer = group.index(dist.get_rank()), torch.empty_like(tensor)
    distance = 1
    while distance < len(group):
        peer = group[me ^ distance]
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, peer), dist.P2POp(dist.irecv, buffer, peer)])
        for work in works:
            work.wait()
        tensor += buffer
        distance *= 2
    ### END SOLUTION


# %% tags=["check"]
check("recursive_doubling")
### BEGIN HIDDEN TESTS
check("recursive_doubling", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Any number of ranks: the fold
#
# With $p = 6$ there is no partner $r \oplus 4$ for ranks 2 and 3. Thakur et al. fold the extra
# ranks in first: with $p'$ the largest power of two $\le p$ (here 4), the first $2(p - p')$
# ranks pair up; each **even** one among them ($0, 2, \dots, 2(p-p')-2$) sends its tensor to
# the odd rank above it and sits out. The odd one adds it to its own and stands for both. The
# $p'$ **survivors** (the odd ranks below $2(p-p')$, then every rank from $2(p-p')$ up, in rank
# order) run `recursive_doubling` as a group. Last, each odd rank that stood in for a partner
# sends it the result. For $p = 6$: 0 → 1 and 2 → 3; ranks 1, 3, 4, 5 double; 1 → 0 and 3 → 2.
# That is two steps more than $\log_2 p'$, each carrying the whole tensor.
#
# Write `recursive_doubling_all_reduce(tensor)` for any $p$, using your `recursive_doubling`.
# Here the fold's messages go one way at a time, so blocking `dist.send` and `dist.recv` are
# fine.

# %% tags=["solution"]
def recursive_doubling_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all p ranks in place: fold the first 2(p - p') ranks in pairs, double among p', unfold."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    extra = p - (1 << (p.bit_length() - 1))
    if rank < 2 * extra and rank % 2 == 0:
        dist.send(tensor, rank + 1)
        dist.recv(tensor, rank + 1)
        return tensor
    if rank < 2 * extra:
        buffer = torch.empty_like(tensor)
        dist.recv(buffer, rank - 1)
        tensor += buffer
    recursive_doubling(tensor, [r for r in range(p) if r >= 2 * extra or r % 2 == 1])
    if rank < 2 * extra:
        dist.send(tensor, rank - 1)
    return tensor
    ### END SOLUTION


# %% tags=["check"]
check("any_world_size")
### BEGIN HIDDEN TESTS
check("any_world_size", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On 6 ranks, rank $r$ starting with $[r+1, 10(r+1)]$: every rank should hold $[21, 210]$.

# %%
show_on_ranks(recursive_doubling_all_reduce, 6)

# %% [markdown]
# ## 3. The binomial tree
#
# A tree sums towards one rank and then sends the result back. In the **binomial tree**,
# rank 0 is the root, and in reduce round $k = 0, 1, \dots, \lceil\log_2 p\rceil - 1$:
#
# - a rank whose lowest set bit is $2^k$ (rank % $2^{k+1}$ = $2^k$) sends its partial sum to
#   rank $- 2^k$, its parent, and is done with the reduce;
# - a rank with rank % $2^{k+1}$ = 0 receives from rank $+ 2^k$, if there is such a rank, and
#   adds.
#
# On 8 ranks: round 0, 1 → 0, 3 → 2, 5 → 4, 7 → 6; round 1, 2 → 0, 6 → 4; round 2, 4 → 0.
# The **broadcast** runs the same rounds backwards, each message reversed: rank 0 sends to 4,
# then 0 → 2 and 4 → 6, then every even rank to the odd one above it. The tree has $p - 1$
# edges, each used once up and once down: $2(p-1)$ messages, in $2\lceil\log_2 p\rceil$ rounds,
# and no rank sends (or receives) more than $\lceil\log_2 p\rceil$ of them. That is the same
# number of rounds as recursive doubling, twice over, and the whole tensor every time: in the
# α-β model the tree never beats recursive doubling. It wins in practice when a rank can
# only talk to a few others (a tree maps onto a network's hierarchy), and when the tensor is
# cut into pieces that stream down the tree one after another (a *pipeline*, as NCCL does:
# see the book page on algorithms).
#
# Write `tree_all_reduce(tensor)`, in place, for any $p$. Each message goes one way, so
# blocking `dist.send` and `dist.recv` are fine.

# %% tags=["solution"]
def tree_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over all ranks in place: a binomial-tree reduce to rank 0, then a binomial-tree broadcast."""
    ### BEGIN SOLUTION
    rank, p = dist.get_rank(), dist.get_world_size()
    buffer = torch.empty_like(tensor)
    distance = 1
    while distance < p:  # reduce
        if rank % (2 * distance) == distance:
            dist.send(tensor, rank - distance)
            break
        if rank + distance < p:
            dist.recv(buffer, rank + distance)
            tensor += buffer
        distance *= 2
    distance = 1 << max(p - 1, 0).bit_length()
    while distance > 1:  # broadcast: the same rounds, backwards
        distance //= 2
        if rank % (2 * distance) == distance:
            dist.recv(tensor, rank - distance)
        elif rank % (2 * distance) == 0 and rank + distance < p:
            dist.send(tensor, rank + distance)
    return tensor
    ### END SOLUTION


# %% tags=["check"]
check("tree_all_reduce")
### BEGIN HIDDEN TESTS
check("tree_all_reduce", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Choosing by size
#
# Write `choose_algorithm(nbytes, world_size, alpha, beta)`: return `"ring"` or
# `"recursive_doubling"`, whichever the table above predicts to be faster for an all-reduce of
# `nbytes` bytes on `world_size` ranks, with `alpha` in seconds and `beta` in seconds per
# byte; on a tie, `"ring"`. Mind the steps of recursive doubling when $p$ is not a power of
# two.
#
# Setting the two times equal gives the **crossover** size, where the choice flips: for $p$ a
# power of two,
# $$n^* = \frac{(2(p-1) - \log_2 p)\,\alpha}{(\log_2 p - 2(p-1)/p)\,\beta}.$$
# Below it, recursive doubling; above it, the ring. For $p = 2$ the denominator is 0: one swap
# moves as many bytes as the ring's two steps, so recursive doubling always wins.

# %% tags=["solution"]
def choose_algorithm(nbytes: float, world_size: int, alpha: float, beta: float) -> str:
    """'ring' or 'recursive_doubling', whichever the α-β model predicts faster for this all-reduce; 'ring' on a tie."""
    ### BEGIN SOLUTION
    p = world_size
    log_p = p.bit_length() - 1
    doubling_steps = log_p if p & (p - 1) == 0 else log_p + 2
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    doubling = doubling_steps * (alpha + nbytes * beta)
    return "recursive_doubling" if doubling < ring else "ring"
    ### END SOLUTION


# %% tags=["check"]
check("choose_algorithm")
### BEGIN HIDDEN TESTS
check("choose_algorithm", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The crossover on 8 GPUs, for two links: NVLink 4 (about 3.4 µs per message, 450 GB/s per
# direction) and one InfiniBand NDR port (about 5 µs, 50 GB/s). Both α are assumptions of the
# right order for NCCL between GPUs, not measurements: `06-collectives/alpha_beta` fits them to
# timings. Try other world sizes: how does $n^*$ grow with $p$, and why?

# %%
for link, alpha, bandwidth in (("NVLink 4", 3.4e-6, 450e9), ("InfiniBand NDR", 5e-6, 50e9)):
    sizes = [2**k for k in range(0, 31)]
    choices = [choose_algorithm(n, 8, alpha, 1 / bandwidth) for n in sizes]
    flips = [n for n, before, after in zip(sizes[1:], choices, choices[1:]) if before != after]
    print(f"{link:15} p = 8: the ring from {flips[0] if flips else 'no size'} bytes on (sizes 1, 2, 4, ... 2^30)")
