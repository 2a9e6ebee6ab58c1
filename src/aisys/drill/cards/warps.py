"""Warps: divergence inside a warp, branches uniform across it, and the warp-level steps of a reduction."""

import math

import numpy as np

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.roofline import Cost
from aisys.simt.analysis import WARP

from ..card import Ask, Choice, Number, Several, card

DIVERGENCE = "02-gpu-programming/divergence-occupancy"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]


def _divergent_warps(taken: np.ndarray) -> int:
    """Warps whose lanes do not all agree on a condition (`taken`: one bool per thread of the block)."""
    per_warp = taken.reshape(-1, WARP)
    return int((per_warp.any(axis=1) & ~per_warp.all(axis=1)).sum())


@card(topic="gpu programming", difficulty="easy", frequency="high", page=DIVERGENCE)
def divergent_branch_cost():
    then_cycles, else_cycles = 20, 30
    return Ask(
        f"In one warp, {WARP // 2} lanes take the `if` branch ({then_cycles} instructions) and {WARP // 2} the "
        f"`else` branch "
        f"({else_cycles} instructions). At one instruction per clock, how many clocks does the warp spend on the "
        "two branches?",
        Number(then_cycles + else_cycles, rel=0.01, unit="clocks"),
        "A warp issues one instruction for all its lanes. When lanes disagree it runs the `if` path with the "
        "other lanes masked off, then the `else` path the other way round: the lanes of one side wait for the "
        f"other. {then_cycles} + {else_cycles} = {then_cycles + else_cycles} clocks, where a warp whose lanes all "
        f"agreed would spend {then_cycles} or {else_cycles}.")


@card(topic="gpu programming", difficulty="medium", frequency="high", page=DIVERGENCE)
def which_branches_diverge():
    t = np.arange(256)
    conditions = {"t % 2 == 0": t % 2 == 0, "(t / 32) % 2 == 0 (integer division)": (t // WARP) % 2 == 0,
                  "t < 48": t < 48, "t % 64 < 32": t % 64 < 32, "blockIdx.x % 2 == 0": np.zeros(256, bool),
                  "t >= 64": t >= 64}
    divergent = {name: _divergent_warps(taken) for name, taken in conditions.items()}
    options = tuple(conditions)
    return Ask(
        "A block has 256 threads, t = threadIdx.x. Which of these `if` conditions make some warp diverge?",
        Several(options, frozenset(i for i, name in enumerate(options) if divergent[name])),
        f"Only lanes of one warp ({WARP} consecutive t) that disagree cost anything. Divergent warps per "
        "condition: " + "; ".join(f"{name}: {n}" for name, n in divergent.items()) + ". A condition that is "
        f"constant over each run of {WARP} threads (t / {WARP}, t % 64 < 32, t >= 64, anything of blockIdx) "
        "never diverges, even if it differs between warps; t < 48 splits one warp.")


@card(topic="reductions", difficulty="hard", frequency="medium", page=DIVERGENCE)
def reduction_divergent_warp_steps():
    threads = 256
    t = np.arange(threads)
    steps = [1 << i for i in range(int(math.log2(threads)))]
    interleaved = [_divergent_warps(t % (2 * s) == 0) for s in steps]
    contiguous = [_divergent_warps(t < threads // (2 * s)) for s in steps]
    return Ask(
        f"A block of {threads} threads sums shared memory in a tree: at step s = 1, 2, ..., {steps[-1]}, thread t "
        "adds data[t + s] into data[t] if t % (2s) == 0 (Harris's interleaved version). Over all steps, how many "
        "(warp, step) pairs diverge?",
        Number(sum(interleaved), rel=0.01, unit="warp-steps"),
        f"At each step the active threads are the multiples of 2s. Divergent warps per step: {interleaved}, "
        f"{sum(interleaved)} in all: while 2s <= {WARP} every warp has active and idle lanes. Giving the same work "
        f"to the first threads instead (thread t < {threads}/(2s) adds data[t + {threads}/(2s)], sequential "
        f"addressing) keeps whole warps active or idle: {contiguous}, {sum(contiguous)} in all, only once fewer "
        f"than {WARP} threads are active.")


@card(topic="reductions", difficulty="easy", frequency="high", page="02-gpu-programming/synchronisation")
def warp_shuffle_reduction_steps():
    steps = int(math.log2(WARP))
    offsets = [WARP >> (i + 1) for i in range(steps)]
    return Ask(
        "How many __shfl_down_sync steps does it take to sum 32 values held one per lane of a warp?",
        Number(steps, rel=0.01, unit="steps"),
        f"Each step halves the number of partial sums: lane i adds the value of lane i + offset, with offsets "
        f"{offsets}, log2({WARP}) = {steps} steps, after which lane 0 holds the sum. No shared memory and no "
        "__syncthreads: the lanes of a warp exchange registers directly.")


@card(topic="reductions", difficulty="medium", frequency="high", page="exercises/02-gpu-programming/reduction")
def reduction_time_lower_bound():
    n = 2**28
    read = n * bytes_per_element("fp32")  # every element once; the one result written is negligible
    cost = Cost(flops=n, bytes=read)
    seconds = read / H100.memory_bandwidth
    return Ask(
        "What is the least time an H100 SXM5 needs to sum 2^28 float32 values held in HBM (in µs)?",
        Number(seconds * 10**6, rel=0.05, unit="µs"),
        f"A sum does one add per element, an intensity of {prose.significant(cost.intensity)} FLOP per byte "
        f"against a ridge of {H100.ridge_point('fp32'):.0f} for FP32: it is bound by reading "
        f"{prose.rate(read, 'B')} at {prose.rate(H100.memory_bandwidth, 'B/s')}, {prose.duration(seconds)}. A good "
        "reduction kernel comes close; how the tree inside a block is arranged matters only in that it must not "
        "slow the reads down.")


@card(topic="gpu programming", difficulty="medium", frequency="low", page="02-gpu-programming/sm-warps-simt")
def independent_thread_scheduling():
    options = ("each thread has its own program counter and call stack",
               "the lanes of a diverged warp may interleave their two paths",
               "the two paths of a divergent branch run at the same time on different lanes",
               "code that relied on the warp running in lockstep needs __syncwarp()",
               "a warp may run with fewer than 32 lanes active")
    return Ask(
        "Since Volta (independent thread scheduling), which statements about warps are true?",
        Several(options, frozenset({0, 1, 3, 4})),
        "Volta gave every thread its own program counter and stack, so a diverged warp can switch between its "
        "paths (which lets lanes wait on each other without deadlock), but one warp still issues one "
        "instruction at a time for the lanes on one path: the paths take turns, they do not run together. "
        "Warp-synchronous code that assumed lockstep execution must reconverge explicitly with __syncwarp() or "
        f"use the *_sync intrinsics. A warp is {WARP} lanes, some of which may be masked off.")


@card(topic="gpu programming", difficulty="easy", frequency="medium", page=DIVERGENCE)
def divergence_across_warps_is_free():
    options = ("yes: every branch costs both paths for every warp",
               "no: divergence is only between lanes of one warp",
               "yes, unless the block has fewer than 1024 threads",
               "no, but only for warps of the same block")
    return Ask(
        "In a kernel, warp 0 always takes the `if` path and warp 1 always the `else` path. Does this "
        "branch cost either warp anything extra?",
        Choice(options, 1),
        f"A warp ({WARP} lanes) runs one instruction stream. Different warps are scheduled independently, so "
        "warp 0 runs only the `if` and warp 1 only the `else`: no serialisation. Branching on the warp index "
        f"(threadIdx.x / {WARP}) is a standard way to give warps different jobs (warp specialisation).")
