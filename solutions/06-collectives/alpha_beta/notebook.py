# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the α-β cost of a collective
#
# **You will learn** to predict how long a collective takes from two numbers of the
# network, α (the fixed cost of one message) and β (the time per byte); to tell from the
# formulas which algorithm wins for small and for large buffers, and where they cross; to
# report a collective's speed as nccl-tests does (bus bandwidth); and to fit α and β to
# timings you measure yourself, on real processes on this machine.
#
# **The model** (Hockney 1994). Sending one message of $n$ bytes takes $\alpha + n\beta$. An
# algorithm for a collective on $p$ ranks sends messages in steps; its time is
#
# $$T = a\,\alpha + b\,n\,\beta,$$
#
# with $a$ the number of messages one after another on its critical path (the **latency
# term**) and $b\,n$ the bytes the busiest link carries one after another (the **bandwidth
# term**). The time to add the numbers up (γ per byte) is left out: on a GPU the addition
# runs at memory bandwidth, several times faster than any link.
#
# In each function, replace `raise NotImplementedError()` with your code, then run the
# check cell below it. The checks you see use a few fixed cases; when your work is graded,
# hidden checks run the same functions on many more. Write the functions yourself: when
# grading, `aisys.collectives.cost` and `aisys.collectives.busbw` (the reference answers)
# cannot be imported.

# %%
import math

from aisys_grader import checker

check = checker("06-collectives/alpha_beta", globals())


def ceil_log2(p: int) -> int:
    """⌈lg p⌉: rounds of a binomial tree on p ranks (0 for p = 1)."""
    return (p - 1).bit_length()


def floor_log2(p: int) -> int:
    """⌊lg p⌋: rounds of recursive doubling among the largest power of two <= p ranks."""
    return p.bit_length() - 1


def is_power_of_two(p: int) -> bool:
    return p & (p - 1) == 0


# %% [markdown]
# ## 1. The formulas
#
# $n$ is the size in bytes of one rank's whole buffer (for all-gather the gathered output, for
# reduce-scatter the input), $p$ the number of ranks, $\lg p = \log_2 p$. From Thakur,
# Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH"
# (IJHPCA 2005):
#
# | collective | algorithm | latency term | bandwidth term |
# | --- | --- | --- | --- |
# | `all_reduce` | `ring` (reduce-scatter, then all-gather) | $2(p-1)\,\alpha$ | $2\frac{p-1}{p}\,n\beta$ |
# | `all_reduce` | `tree` (binomial reduce, broadcast) | $2\lceil \lg p\rceil\,\alpha$ | $2\lceil \lg p\rceil\,n\beta$ |
# | `all_reduce` | `recursive_doubling` | $\lg p\,\alpha$ | $\lg p\,n\beta$ |
# | `all_reduce` | `halving_doubling` (Rabenseifner) | $2\lg p\,\alpha$ | $2\frac{p-1}{p}\,n\beta$ |
# | `all_gather` | `ring` | $(p-1)\,\alpha$ | $\frac{p-1}{p}\,n\beta$ |
# | `all_gather` | `recursive_doubling` | $\lceil \lg p\rceil\,\alpha$ | $\frac{p-1}{p}\,n\beta$ |
# | `reduce_scatter` | `ring` | $(p-1)\,\alpha$ | $\frac{p-1}{p}\,n\beta$ |
# | `reduce_scatter` | `halving_doubling` (recursive halving) | $\lceil \lg p\rceil\,\alpha$ | $\frac{p-1}{p}\,n\beta$ |
# | `broadcast` | `tree` (binomial) | $\lceil \lg p\rceil\,\alpha$ | $\lceil \lg p\rceil\,n\beta$ |
# | `broadcast` | `ring` | $(\lceil \lg p\rceil + p-1)\,\alpha$ | $2\frac{p-1}{p}\,n\beta$ |
# | `broadcast` | `recursive_doubling` | $2\lceil \lg p\rceil\,\alpha$ | $2\frac{p-1}{p}\,n\beta$ |
#
# (The `ring` and `recursive_doubling` broadcasts scatter the buffer down a binomial tree, then
# all-gather it by a ring or by recursive doubling.)
#
# **When $p$ is not a power of two**, a tree simply has $\lceil \lg p\rceil$ levels, and
# all-gather uses Bruck's algorithm, also $\lceil \lg p\rceil$ steps. But the all-reduces by
# recursive doubling and halving-doubling pair rank $r$ with $r \oplus 2^k$, which needs a
# power of two, so they first **fold**: with $p' = 2^{\lfloor \lg p\rfloor}$, the $p - p'$
# extra ranks hand their whole buffer to a partner ($\alpha + n\beta$), the $p'$ others run
# the algorithm, and the result goes back ($\alpha + n\beta$). So for $p$ not a power of two:
# `recursive_doubling` costs $(\lfloor \lg p\rfloor + 2)(\alpha + n\beta)$, and
# `halving_doubling` costs $(2\lfloor \lg p\rfloor + 2)\,\alpha + \left(2\frac{p'-1}{p'} + 2\right) n\beta$.
# On one rank nothing is sent: every time is 0.
#
# Use `ceil_log2`, `floor_log2` and `is_power_of_two` above. For a pair not in the table,
# raise a `ValueError` (it is not graded).

# %% tags=["solution"]
def predicted_time(collective: str, algorithm: str, nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """Seconds the α-β model predicts for `collective` by `algorithm` on `world_size` ranks with an `nbytes` buffer."""
    ### BEGIN SOLUTION
    p, up, down = world_size, ceil_log2(world_size), floor_log2(world_size)
    fold = 0 if is_power_of_two(p) else 2  # the extra ranks' data in, and the result back out
    survivors = 2**down
    table = {  # (collective, algorithm) -> (messages in sequence, bytes on the busiest link per byte of buffer)
        ("all_reduce", "ring"): (2 * (p - 1), 2 * (p - 1) / p),
        ("all_reduce", "tree"): (2 * up, 2 * up),
        ("all_reduce", "recursive_doubling"): (down + fold, down + fold),
        ("all_reduce", "halving_doubling"): (2 * down + fold, 2 * (survivors - 1) / survivors + fold),
        ("all_gather", "ring"): (p - 1, (p - 1) / p),
        ("all_gather", "recursive_doubling"): (up, (p - 1) / p),
        ("reduce_scatter", "ring"): (p - 1, (p - 1) / p),
        ("reduce_scatter", "halving_doubling"): (up, (p - 1) / p),
        ("broadcast", "tree"): (up, up),
        ("broadcast", "ring"): (up + p - 1, 2 * (p - 1) / p),
        ("broadcast", "recursive_doubling"): (2 * up, 2 * (p - 1) / p),
    }
    if (collective, algorithm) not in table:
        raise ValueError(f"no formula for {algorithm!r} {collective!r}")
    latency, volume = table[collective, algorithm]
    return latency * alpha + volume * nbytes * beta
    ### END SOLUTION


# %% tags=["check"]
check("predicted_time")
### BEGIN HIDDEN TESTS
check("predicted_time", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Before going on, look at the numbers. On 8 GPUs joined by NVLink 4 (450 GB/s per direction,
# so β = 1/450 GB/s ≈ 2.2 ps per byte; α = 3.4 µs, the latency NCCL's own tuning model charges
# a ring step on NVLink, in `src/graph/tuning.cc`), which all-reduce is fastest for a 4 KiB
# buffer, and which for 1 GiB?

# %%
nvlink_alpha, nvlink_beta = 3.4e-6, 1 / 450e9
for nbytes in (4 * 2**10, 2**30):
    for algorithm in ("ring", "tree", "recursive_doubling", "halving_doubling"):
        seconds = predicted_time("all_reduce", algorithm, nbytes, 8, nvlink_alpha, nvlink_beta)
        print(f"{nbytes:>10} B  {algorithm:20} {seconds * 1e6:10.1f} µs")

# %% [markdown]
# ## 2. Bus bandwidth
#
# Benchmarks report a collective's speed as a bandwidth. NVIDIA's nccl-tests
# (`doc/PERFORMANCE.md`) define the **algorithm bandwidth** `algbw = n / t` (bytes of one
# rank's buffer over the time) and the **bus bandwidth** `busbw = algbw × factor`, where the
# factor is the fraction of the buffer that the bandwidth-optimal algorithm moves over each
# rank's link: $2\frac{p-1}{p}$ for all-reduce (the ring's bandwidth term above),
# $\frac{p-1}{p}$ for all-gather and reduce-scatter, 1 for broadcast. busbw can be compared
# with the link's own bandwidth whatever $p$ is: a ring all-reduce that runs at the link's
# speed has busbw equal to it.

# %% tags=["solution"]
def bus_bandwidth(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """nccl-tests' busbw in bytes/s of a collective that took `seconds` on an `nbytes` buffer."""
    ### BEGIN SOLUTION
    p = world_size
    factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p, "reduce_scatter": (p - 1) / p,
              "broadcast": 1.0}[collective]
    return nbytes / seconds * factor
    ### END SOLUTION


# %% tags=["check"]
check("bus_bandwidth")
### BEGIN HIDDEN TESTS
check("bus_bandwidth", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Fitting α and β
#
# Time a message of each size, and α and β are the intercept and slope of the line
# $t = \alpha + n\beta$ through the points. Two things make a naive fit go wrong:
#
# - **Timings have a heavy tail.** Now and then the operating system deschedules a process
#   and one run takes 10 times as long. When `seconds` has one row of repeats per size
#   (shape `(len(sizes), repeats)`), take the **median** of each row first; a 1-D `seconds`
#   has one time per size already.
# - **Sizes span six orders of magnitude.** A 1 GiB message takes a million times longer than
#   an 8-byte one, and its noise is larger than α. Ordinary least squares minimises absolute
#   errors, so it fits the large messages and lets α land anywhere. Minimise the **relative**
#   errors instead, $\sum_i \left(\frac{\alpha + n_i\beta - t_i}{t_i}\right)^2$: that is least
#   squares with each row of the system $[1, n_i]\,(\alpha, \beta)^T = t_i$ divided by $t_i$.
#
# Return `(alpha, beta)` as two floats. `np.linalg.lstsq` solves least squares.

# %% tags=["solution"]
import numpy as np


def fit_alpha_beta(sizes, seconds) -> tuple[float, float]:
    """(α, β) of t = α + nβ: median over repeats, then least squares in relative error."""
    ### BEGIN SOLUTION
    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    if seconds.ndim == 2:
        seconds = np.median(seconds, axis=1)
    rows = np.stack([np.ones_like(sizes), sizes], axis=1) / seconds[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(rows, np.ones_like(seconds), rcond=None)
    return float(alpha), float(beta)
    ### END SOLUTION


# %% tags=["check"]
check("fit_alpha_beta")
### BEGIN HIDDEN TESTS
check("fit_alpha_beta", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The crossover
#
# Two algorithms' times are two straight lines in $n$: $a_1\alpha + b_1 n\beta$ and
# $a_2\alpha + b_2 n\beta$. Below the size where they meet, the one with fewer messages wins;
# above it, the one that moves fewer bytes. Return that size in bytes, or `None` when the
# lines never meet at a size above 0 (they are parallel, or one algorithm is never slower).
# You can get $a$ and $b$ from your `predicted_time` by choosing α and β cleverly.

# %% tags=["solution"]
def crossover(collective: str, algorithm_a: str, algorithm_b: str, world_size: int, alpha: float, beta: float):
    """Bytes at which the two algorithms' predicted times are equal, or None if they never are for n > 0."""
    ### BEGIN SOLUTION
    def terms(algorithm):  # (messages, bytes per byte of buffer): the times at α = 1, β = 0 and at α = 0, β = 1
        return (predicted_time(collective, algorithm, 1, world_size, 1, 0),
                predicted_time(collective, algorithm, 1, world_size, 0, 1))

    (latency_a, volume_a), (latency_b, volume_b) = terms(algorithm_a), terms(algorithm_b)
    if math.isclose(volume_a, volume_b, rel_tol=1e-12, abs_tol=1e-12):
        return None
    nbytes = (latency_a - latency_b) * alpha / ((volume_b - volume_a) * beta)
    return nbytes if nbytes > 0 else None
    ### END SOLUTION


# %% tags=["check"]
check("crossover")
### BEGIN HIDDEN TESTS
check("crossover", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Where does a ring all-reduce start to beat recursive doubling on 8 GPUs? The answer moves
# with α/β, so with the link (α per step from NCCL's tuning model; β from each link's one-way
# bandwidth: NVLink 4 450 GB/s, PCIe 5.0 x16 63 GB/s, InfiniBand NDR 50 GB/s):

# %%
for link, (alpha, beta) in {"NVLink 4": (3.4e-6, 1 / 450e9), "PCIe 5.0 x16": (5.7e-6, 1 / 63e9),
                            "InfiniBand NDR": (14e-6, 1 / 50e9)}.items():
    size = crossover("all_reduce", "ring", "recursive_doubling", 8, alpha, beta)
    print(f"{link:16} ring beats recursive doubling above {size / 2**10:8.0f} KiB")

# %% [markdown]
# ## 5. Measuring this machine
#
# Now real processes. The cell below starts 2 ranks with `aisys.collectives.launch`
# (torch.distributed, gloo backend) and times a ping-pong: rank 0 sends `n` bytes, rank 1
# sends them back, and half the round trip is one message. Over loopback TCP, α is the cost
# of a trip through the kernel's network stack (tens of µs) and β that of copying through it:
# numbers of this computer's CPU and operating system, not of any network. Rerun it a few
# times; close other programs if the times jump around.

# %%
from aisys.collectives import measure

PING_PONG_SIZES = [8 * 4**k for k in range(9)]  # 8 B to 512 KiB
one_way = measure.ping_pong(PING_PONG_SIZES, repeats=10)


def measurements() -> dict:
    """What you measured: the check below fits it with your function and with the reference."""
    return {"sizes": PING_PONG_SIZES, "seconds": [float(t) for t in one_way]}


# %%
alpha, beta = fit_alpha_beta(PING_PONG_SIZES, one_way)
print(f"α = {alpha * 1e6:.1f} µs, β = {beta * 1e9:.3f} ns/byte ({1 / beta / 1e9:.2f} GB/s)")
for nbytes, seconds in zip(PING_PONG_SIZES, one_way):
    print(f"{nbytes:>8} B  measured {seconds * 1e6:8.1f} µs   fitted {(alpha + nbytes * beta) * 1e6:8.1f} µs")

# %% tags=["check"]
check("measured_fit")
### BEGIN HIDDEN TESTS
check("measured_fit", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Finally, two all-reduce algorithms on 4 ranks: the ring of `aisys.collectives.ring` and the
# recursive doubling of `aisys.collectives.tree`, both built from point-to-point messages.
# Your model predicts where the ring starts to win; here is where it does on this machine.
# (The recursive doubling first checks, with one small all-gather, that all ranks hold tensors
# of the same size: a few α more than the formula.)

# %%
from aisys.collectives import ring, tree

RANKS = 4
ALL_REDUCE_SIZES = [4 * 4**k for k in range(3, 10)]  # 256 B to 1 MiB
ring_seconds = measure.time_collective(lambda x: ring.all_reduce(x, check_sizes=False), ALL_REDUCE_SIZES, RANKS,
                                       repeats=3)
doubling_seconds = measure.time_collective(tree.recursive_doubling_all_reduce, ALL_REDUCE_SIZES, RANKS, repeats=3)
for nbytes, t_ring, t_doubling in zip(ALL_REDUCE_SIZES, ring_seconds, doubling_seconds):
    print(f"{nbytes:>8} B  ring {t_ring * 1e6:8.0f} µs  recursive doubling {t_doubling * 1e6:8.0f} µs  "
          f"ring busbw {bus_bandwidth('all_reduce', nbytes, t_ring, RANKS) / 1e9:.2f} GB/s")
ring_wins = [n for n, a, b in zip(ALL_REDUCE_SIZES, ring_seconds, doubling_seconds) if a < b]
predicted = crossover("all_reduce", "ring", "recursive_doubling", RANKS, alpha, beta)
print("predicted crossover:", f"{predicted:.0f} B" if predicted else "none (is the fitted α or β <= 0? measure again)")
print("measured: the ring first wins at", f"{ring_wins[0]} B" if ring_wins else "no size measured here")

# %% [markdown]
# **Think about it** (not graded). How close is the prediction? Three things the model leaves
# out: the addition (γ), which on a CPU costs about as much per byte as the copy; the 4 ranks
# sharing fewer cores than 4, so that a rank waits for a core as well as for a message; and
# the ranks' messages all crossing one kernel's network stack at once, where the model gives
# each rank its own link. Which of these favours the ring, and which recursive doubling?
