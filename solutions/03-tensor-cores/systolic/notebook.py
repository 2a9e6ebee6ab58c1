# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise ★: a cycle-accurate systolic array
#
# **You will learn** how a systolic array multiplies matrices with nothing but
# neighbour-to-neighbour wires: why its inputs must enter **skewed**, one cycle later per row;
# what each processing element (PE) does in one cycle in the **output-stationary** and the
# **weight-stationary** dataflow; how many cycles a product takes, and so how busy the array
# is; and how a product larger than the array is cut into tiles, and what the ragged last
# tiles cost. Google's TPU v1 is a 256 x 256 weight-stationary array of 8-bit multiply-adds at
# 700 MHz, 92 TOPS (Jouppi et al., ISCA 2017); each TPU v4 chip has eight 128 x 128 arrays.
#
# An $R \times C$ array is a grid of PEs; PE$(i, j)$ is in row $i$ and column $j$, PE$(0, 0)$
# at the top left. Every cycle, every PE multiplies two numbers, adds the product to a third,
# and hands values to its right and lower neighbours, all at once (Kung and Leiserson,
# "Systolic arrays (for VLSI)", 1979; H. T. Kung, "Why systolic architectures?", IEEE
# Computer, 1982). Data enters only at the left and top edges; nothing is broadcast and no PE
# reaches further than its neighbours. That is why such arrays scale: the wires stay short
# however large the array.
#
# You write the parts of the machine; the model runs them. `array.run(A, B, rows, cols,
# dataflow, step=..., skew=...)` drives one tile of $C = AB$ through the array, cycle by cycle:
# each cycle it asks your `skew` which values enter at the edges and your step function for
# every register's value one cycle later, and it **accepts that answer only if it obeys the
# dataflow's rule**: a value moves at most one PE per cycle, and a PE adds only the product of
# the two values it holds. A step that breaks the rule stops the run with an error naming the
# cycle, the PE and the register. Every cycle is kept in a `Trace` (the registers, where each
# value came from, which PEs did useful work), so utilisation and cycle counts are *measured*.
# When your work is graded, the model runs on the grader's side and calls your functions once
# per cycle: computing `A @ B` some other way cannot pass. `aisys.systolic.array` (the model)
# and `aisys.systolic.pictures` can be imported when grading; the reference answers cannot.
#
# **Conventions.** Cycle 0 is the first cycle in which data enters the array; a run of $T$
# cycles is cycles $0 \dots T-1$. Within a cycle, values move first; then each PE multiplies
# the values that have just arrived. An empty slot (a *bubble*) holds 0.

# %%
import math

import numpy as np
from aisys.systolic import array, pictures
from aisys_grader import checker

check = checker("03-tensor-cores/systolic", globals())

# Small matrices with distinct values, so that you can follow each value through a trace.
A = np.arange(1, 13).reshape(3, 4)  # 3 x 4
B = np.arange(13, 25).reshape(4, 3)  # 4 x 3
print(A, B, A @ B, sep="\n\n")

# %% [markdown]
# ## 1. The skewed feed
#
# In the output-stationary array of section 2, PE$(i, j)$ computes $C_{ij} = \sum_k A_{ik}
# B_{kj}$. Row $i$ of $A$ is a **stream** that enters the array at the left end of row $i$, one
# element per cycle, and moves right; column $j$ of $B$ enters at the top of column $j$ and
# moves down. A value that enters row $i$ in cycle $s$ is at PE$(i, j)$ in cycle $s + j$, $j$
# hops later.
#
# For $A_{ik}$ and $B_{kj}$ to meet at PE$(i, j)$ in the same cycle, the streams cannot all
# start together. If stream $i$ starts $i$ cycles late, $A_{ik}$ enters in cycle $i + k$ and
# reaches PE$(i, j)$ in cycle $i + j + k$; $B_{kj}$, in stream $j$ of $B$, enters in cycle
# $j + k$ and comes down $i$ rows to PE$(i, j)$ in cycle $i + j + k$ too. They meet.
# This delay is the **skew**: the data enters as a parallelogram, and the work sweeps the
# array as a diagonal **wavefront**.
#
# Write `skew(t, n, length)`: for $n$ streams of `length` elements each, return an integer
# array of $n$ entries saying which element of each stream enters in cycle `t`: stream $i$
# sends element $t - i$ while $0 \le t - i <$ `length`, and $-1$ (nothing: a bubble) before it
# starts and after its last element. The model calls `skew(t, m, K)` for the rows of $A$,
# `skew(t, n, K)` for the columns of $B$, and in the weight-stationary array
# `skew(t, k, M)` for the columns of $A$ (counting $t$ from the first cycle after the weights
# are loaded).

# %% tags=["solution"]
def skew(t: int, n: int, length: int) -> np.ndarray:
    """Index of the element of each of n streams entering in cycle t (stream i is i cycles late), -1 for none."""
    ### BEGIN SOLUTION
    k = t - np.arange(n)
    return np.where((k >= 0) & (k < length), k, -1)
    ### END SOLUTION


# %% tags=["check"]
check("skew")
### BEGIN HIDDEN TESTS
check("skew", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The feed of 3 streams of 4 elements, cycle by cycle (one row per cycle, one column per
# stream): the parallelogram.

# %%
for t in range(3 + 4):
    print(f"cycle {t}:", skew(t, 3, 4))

# %% [markdown]
# ## 2. Output-stationary: the outputs stay, the inputs move
#
# Each PE owns one output and accumulates it in register `acc`; register `a` carries values of
# $A$ rightwards, register `b` values of $B$ downwards. Each cycle, with `left[i]` entering row
# $i$ and `top[j]` entering column $j$ (the values your skew chose, or 0),
#
# $$a'_{ij} = a_{i,j-1} \;(\texttt{left}_i \text{ for } j = 0), \qquad
#   b'_{ij} = b_{i-1,j} \;(\texttt{top}_j \text{ for } i = 0), \qquad
#   acc'_{ij} = acc_{ij} + a'_{ij}\, b'_{ij}.$$
#
# The value leaving the last column (or row) falls off the array. Write `os_step(a, b, acc,
# left, top)` returning the new `(a, b, acc)`: `a`, `b` and `acc` have shape (rows, cols),
# `left` has rows entries and `top` cols. Think of every PE doing its part in parallel; numpy
# slices do a whole shift at once. The model passes copies, so changing them in place is safe.
#
# A tile here is at most rows x cols outputs: `A` is m x K and `B` is K x n with m <= rows and
# n <= cols; K can be anything, since it streams through.

# %% tags=["solution"]
def os_step(a, b, acc, left, top):
    """One output-stationary cycle: a moves right, b moves down, each PE adds the product of its new a and b."""
    ### BEGIN SOLUTION
    a = np.concatenate([left[:, None], a[:, :-1]], axis=1)
    b = np.concatenate([top[None, :], b[:-1]], axis=0)
    return a, b, acc + a * b
    ### END SOLUTION


# %% tags=["check"]
check("os_step")
### BEGIN HIDDEN TESTS
check("os_step", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your step and your skew, on a 3 x 3 array. Each grid shows what a register holds by where it
# came from: `A0,2` is $A_{02}$, `.` a bubble, and `acc` shows how many products it has added.
# Watch the wavefront cross the array, then count the cycles.

# %%
trace = array.run(A, B, 3, 3, "os", step=os_step, skew=skew)
for t in (0, 2, 4):
    print(pictures.text(trace, t), end="\n\n")  # pictures.figure(trace, [0, 2, 4]) draws them
print("C == A @ B:", np.array_equal(trace.output, A @ B), f"in {trace.cycles} cycles")
print("busy share per cycle:", np.round(trace.utilisation, 2))

# %% [markdown]
# ## 3. Weight-stationary: the weights stay
#
# Here PE$(i, j)$ keeps one element of $B$, the weight $w_{ij} = B_{ij}$ (so $B$ is k x n with
# k <= rows and n <= cols). The model loads the weights before the product starts, by shifting
# the rows of $B$ down from the top edge, last row first, one row per cycle: $k$ cycles. Then
# the activations move right (register `x`): column $i$ of $A$ is the stream that enters row
# $i$, so PE$(i, j)$ sees $A_{0i}, A_{1i}, \dots$ in turn; and the **partial sums** move down
# (register `psum`), each PE adding its activation times its weight:
#
# $$x'_{ij} = x_{i,j-1} \;(\texttt{left}_i \text{ for } j = 0), \qquad
#   psum'_{ij} = psum_{i-1,j} + x'_{ij}\, w_{ij} \;(0 + \dots \text{ for } i = 0).$$
#
# The partial sum of $C_{rj}$ starts at the top of column $j$, collects $A_{ri} B_{ij}$ in
# every row $i$ on its way down, and leaves the bottom row finished. $A$ (M x k) can have any
# number of rows $M$: they all stream past the same weights, which is how the TPU runs a batch.
# Write `ws_step(x, psum, w, left)` returning the new `(x, psum)` (`w` does not change).

# %% tags=["solution"]
def ws_step(x, psum, w, left):
    """One weight-stationary cycle: x moves right; each partial sum moves down and adds the PE's x times w."""
    ### BEGIN SOLUTION
    x = np.concatenate([left[:, None], x[:, :-1]], axis=1)
    above = np.concatenate([np.zeros_like(psum[:1]), psum[:-1]], axis=0)
    return x, above + x * w
    ### END SOLUTION


# %% tags=["check"]
check("ws_step")
### BEGIN HIDDEN TESTS
check("ws_step", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The same product with $B$ (4 x 3) held in a 4 x 3 array and the 3 rows of $A$ streaming
# through. `C0,1:2` in `psum` is the partial sum of $C_{01}$ after 2 of its 4 terms.

# %%
trace = array.run(A, B, 4, 3, "ws", step=ws_step, skew=skew)
for t in (2, 5, 8):
    print(pictures.text(trace, t), end="\n\n")
print("C == A @ B:", np.array_equal(trace.output, A @ B), f"in {trace.cycles} cycles")

# %% [markdown]
# ## 4. Products larger than the array: tiles
#
# An array of rows x cols holds a tile of that size, so a larger product is cut into tiles
# that run one after another (this model does not overlap them), and the partial results meet
# outside the array (the TPU v1 keeps them in 4 MiB of 32-bit accumulators below its array).
# A tile is a dict of half-open ranges, `{"m": [m0, m1], "n": [n0, n1], "k": [k0, k1]}`: it
# adds `A[m0:m1, k0:k1] @ B[k0:k1, n0:n1]` into `C[m0:m1, n0:n1]`.
#
# - **Output-stationary**: each tile is at most rows x cols *outputs* (m and n); K streams
#   through whole.
# - **Weight-stationary**: each tile is at most rows x cols *weights* (k and n); all M rows of
#   A stream through whole, and the K-tiles' partial products add up outside the array.
#
# When a size is not a multiple of the array's, the last tile along it is **ragged**: smaller,
# with idle PEs. Write `schedule(M, N, K, rows, cols, dataflow)` returning the list of tiles,
# each product $A_{mk} B_{kn}$ in exactly one tile, with as few tiles as the array allows (in
# any order). The grader runs your tiles on the model and measures the product and the cycles.

# %% tags=["solution"]
def schedule(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> list[dict]:
    """The tiles of C (M x N) = A (M x K) @ B (K x N) on a rows x cols array, for dataflow 'os' or 'ws'."""
    ### BEGIN SOLUTION
    def spans(size, step):
        return [[start, min(start + step, size)] for start in range(0, size, step)]

    if dataflow == "os":
        return [{"m": m, "n": n, "k": [0, K]} for m in spans(M, rows) for n in spans(N, cols)]
    return [{"m": [0, M], "n": n, "k": k} for n in spans(N, cols) for k in spans(K, rows)]
    ### END SOLUTION


# %% tags=["check"]
check("schedule")
### BEGIN HIDDEN TESTS
check("schedule", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# A 7 x 6 by 6 x 5 product on a 4 x 4 array, with your steps and your tiles:

# %%
A7, B7 = np.arange(42).reshape(7, 6), np.arange(30).reshape(6, 5)
for dataflow, step in (("os", os_step), ("ws", ws_step)):
    tiles = schedule(7, 5, 6, 4, 4, dataflow)
    done = array.run_schedule(A7, B7, 4, 4, dataflow, tiles, step=step, skew=skew)
    print(f"{dataflow}: {len(tiles)} tiles, {[t.cycles for t in done.traces]} cycles each, {done.cycles} in all; "
          f"C == A @ B: {np.array_equal(done.output, A7 @ B7)}")

# %% [markdown]
# ## 5. Counting cycles
#
# A run lasts until its last output is complete: in output-stationary, when the last product
# is added to an accumulator (reading the accumulators out is not counted); in
# weight-stationary, when the last partial sum reaches the **bottom row of the array**, from
# which it leaves, including the cycles that loaded the weights. Follow the last values
# through the wavefront to find the cycles of one tile (check yourself against the traces of
# sections 2 to 4: the 3 x 4 by 4 x 3 product took `trace.cycles` cycles in each dataflow).
# Mind a ragged tile: which of its sizes does the count depend on, and which of the array's?
#
# Then write `cycles(M, N, K, rows, cols, dataflow)`: the cycles of the whole product, tiled as
# in section 4, tiles one after another. Sizes reach $2^{16}$ and the array can be 1 x 1, so
# sum the tiles with a formula, not a loop over every tile: along one dimension the tiles'
# sizes add up to that dimension.

# %% tags=["solution"]
def cycles(M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> int:
    """Cycles to compute C (M x N) = A (M x K) @ B (K x N) tile after tile on a rows x cols array."""
    ### BEGIN SOLUTION
    # One tile: OS K + m + n - 2, the last product at PE(m-1, n-1) in cycle (K-1) + (m-1) + (n-1);
    # WS k to load + M + rows + n - 2, the last partial sum in the bottom row in cycle
    # k + (M-1) + (rows-1) + (n-1). Summed over the tiles, whose sizes add up to M, N and K:
    tiles_n = math.ceil(N / cols)
    if dataflow == "os":
        tiles_m = math.ceil(M / rows)
        return tiles_m * tiles_n * (K - 2) + tiles_n * M + tiles_m * N
    tiles_k = math.ceil(K / rows)
    return tiles_k * tiles_n * (M + rows - 2) + tiles_n * K + tiles_k * N
    ### END SOLUTION


# %% tags=["check"]
check("cycles")
### BEGIN HIDDEN TESTS
check("cycles", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 6. How busy is the array?
#
# The array does rows x cols multiply-adds per cycle at best, so the share of its peak a
# product reaches is $MNK / (\text{rows} \cdot \text{cols} \cdot \text{cycles})$. Below, a
# TPU v4 sized array (128 x 128) on a large GEMM, on a short one, and on decoding a single token
# (M = 1) through an 8192 x 8192 layer. Before you run it: which dataflow suffers for M = 1,
# and why? Then try K = 128 against K = 8192 in output-stationary.

# %%
shapes = {"GEMM 8192^3": (8192, 8192, 8192), "GEMM, K = 128": (8192, 8192, 128),
          "decode: M = 1": (1, 8192, 8192)}
for name, (M, N, K) in shapes.items():
    for dataflow in ("os", "ws"):
        count = cycles(M, N, K, 128, 128, dataflow)
        print(f"{name:16} {dataflow}: {count:>12,} cycles, {M * N * K / (128 * 128 * count):6.1%} of peak")
