"""The ring all-reduce on symmetric memory in one kernel: each program moves one slice of every chunk, and a flag
per slice, written by the neighbour, orders it instead of a barrier per step.

`aisys.collectives.symmetric_ring.SymmetricRing.all_reduce` launches a kernel a step and a barrier between steps
(2p - 1 barriers in all), and every rank waits at each barrier for the slowest rank's whole step. NCCL orders its
ring per slice instead: a connection's head and tail counters say how far the sender has written and the receiver
has read (src/device/prims_simple.h), so a slice moves on as soon as its own data is there. This kernel does the
same on symmetric memory. Program b of every rank owns slice b of each chunk and runs all 2p - 2 steps:

    tell the successor "entered" (this rank's input is written)
    for each step g:  wait until the predecessor's program b has finished step g - 1 (for g = 0: has entered);
                      mine[c] op= previous[c], or mine[c] = previous[c] in the all-gather, on slice b;
                      tell the successor "step g done"
    tell the predecessor "done reading you"; wait until the successor says the same

Why the one wait per step suffices: the predecessor finished step g - 1 after its own predecessor finished g - 2,
and so on round the ring, so the successor (p - 1 ranks back) has finished step g - p + 1. A copy step
g = p - 1 + t overwrites the chunk that the successor read at its reduce step t = g - p + 1: done by then. The
wait at the end makes the buffer the caller's again, as the barrier after the last step does in the readable
ring. Each flag only grows (a count of the signals sent over all calls), so none is ever reset.

A flag is written by the neighbour into this rank's memory, with a release at system scope after all of the
program's threads have stored their part (`tl.debug_barrier`), and polled here with an acquire: the data a flag
announces is visible once the flag is. Loads of the predecessor's buffer bypass L1 (`.cg`): the all-gather
reads again addresses the reduce-scatter read before, and L1 is not kept coherent with another GPU's writes.

The programs of one rank never wait for each other, only for the same program of a neighbour, so the kernel
needs no more programs resident at once than the GPU holds. On CPU processes (Triton's interpreter, buffers
in shared files) the atomics are the interpreter's C++ atomics on the shared mapping, and the same code runs.
"""

import triton
import triton.language as tl

SUM, PRODUCT, MIN, MAX = (tl.constexpr(i) for i in range(4))  # OP, named as dist.ReduceOp names them
ALIGNMENT = tl.constexpr(16)  # elements: with chunks and slices multiples of this, loads and stores are vectors
BLOCK, NUM_WARPS = 4096, 8  # elements a program moves per iteration, and its warps


@triton.jit
def ring_all_reduce_kernel(mine, previous, flags, next_flags, previous_flags, numel, p, rank, base,
                           OP: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """One program a slice. flags[b]: what the predecessor's program b has signalled this rank (entered: base + 1;
    step g done: base + 2 + g); flags[slices + b]: what the successor's has (done reading: base + 2p - 1).
    next_flags and previous_flags are the successor's and the predecessor's `flags`, mapped here."""
    b = tl.program_id(0)
    slices = tl.num_programs(0)
    size = numel // p
    larger = numel % p  # the first `larger` chunks hold one element more, as ring.chunk_bounds cuts them
    _signal(next_flags + b, base + 1)
    for g in range(2 * p - 2):
        c = (rank + 2 * p - 1 - g) % p  # reduce step s = g: (rank - s - 1) mod p; copy step t = g - p + 1: rank - t
        start = c * size + tl.minimum(c, larger)
        stop = start + size + (c < larger).to(tl.int32)
        per = tl.cdiv(stop - start, slices)
        if ALIGNED:
            per = tl.cdiv(per, ALIGNMENT) * ALIGNMENT
        lo = tl.minimum(start + b * per, stop)
        hi = tl.minimum(lo + per, stop)
        if ALIGNED:
            lo = tl.multiple_of(lo, ALIGNMENT)
            hi = tl.multiple_of(hi, ALIGNMENT)
        _wait(flags + b, base + 1 + g)
        for offset in range(lo, hi, BLOCK):
            i = offset + tl.arange(0, BLOCK)
            inside = i < hi
            x = tl.load(previous + i, mask=inside, cache_modifier=".cg")
            if g < p - 1:
                x = _combine(tl.load(mine + i, mask=inside), x, OP)
            tl.store(mine + i, x, mask=inside)
        _signal(next_flags + b, base + 2 + g)
    _signal(previous_flags + slices + b, base + 2 * p - 1)
    _wait(flags + slices + b, base + 2 * p - 1)


@triton.jit
def _signal(flag, value):
    tl.debug_barrier()  # every thread's stores happen before the release that publishes them
    tl.atomic_xchg(flag, value, sem="release", scope="sys")


@triton.jit
def _wait(flag, value):
    while tl.atomic_add(flag, 0, sem="acquire", scope="sys") < value:
        pass
    tl.debug_barrier()  # no thread reads the slice before the flag is seen


@triton.jit
def _combine(into, received, OP: tl.constexpr):
    """into op received, rounded once to into's type as torch's in-place ops round (16-bit floats via float32)."""
    wide = into.dtype if into.dtype.primitive_bitwidth >= 32 else tl.float32
    a, b = into.to(wide), received.to(wide)
    if OP == SUM:
        result = a + b
    elif OP == PRODUCT:
        result = a * b
    elif OP == MIN:
        result = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        result = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    if into.dtype == tl.bfloat16:
        return _to_bfloat16(result)
    return result.to(into.dtype)


@triton.jit
def _to_bfloat16(x):
    """float32 to bfloat16 rounded to nearest, ties to even, as torch rounds (Triton's interpreter truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # a carry out of the low half rounds up
    rounded = tl.where(x != x, 0x7FC0, rounded)  # NaN stays NaN (the carry could make it infinity)
    return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
