"""Timing messages and collectives on real processes: the measurements the α-β model is fitted to.

    one_way = ping_pong([8, 1024, 2**20], repeats=20)        # seconds per size, median
    ring = time_collective(ring.all_reduce, [4096, 2**20], world_size=4)

Both run on processes started by `aisys.collectives.launch.run_ranks` (gloo on CPU, NCCL with
one GPU per rank). On GPUs the clock stops only after `torch.cuda.synchronize()`, since NCCL
calls return once the work is queued. Times are medians over repeats: a timing's noise has a
heavy tail (the operating system, another process), and the median ignores the tail.
"""

import statistics
import time

import numpy as np

from .._validate import one_of, positive_int
from .launch import BACKENDS, rank_device, run_ranks

WARMUP = 2  # untimed runs per size: the first messages also set up connections and buffers


def ping_pong(sizes, repeats: int = 20, *, backend: str = "gloo") -> np.ndarray:
    """One-way time of a message of each size in bytes between 2 ranks: half the round trip, median over `repeats`.

    Rank 0 sends, rank 1 sends the same bytes back; a round trip is two messages in sequence, so
    half of it is the time of one, α + nβ in the model.
    """
    sizes = _sizes("sizes", sizes, multiple_of=1)
    repeats, backend = positive_int("repeats", repeats), one_of("backend", backend, BACKENDS)
    return np.asarray(run_ranks(_ping_pong_rank, 2, [(sizes, repeats, backend)] * 2, backend=backend)[0])


def _ping_pong_rank(sizes, repeats, backend):
    import torch
    import torch.distributed as dist

    rank, device = dist.get_rank(), rank_device(backend)
    medians = []
    for nbytes in sizes:
        buffer = torch.ones(nbytes, dtype=torch.uint8, device=device)
        round_trips = []
        for repeat in range(WARMUP + repeats):
            start = time.perf_counter()
            if rank == 0:
                dist.send(buffer, 1)
                dist.recv(buffer, 1)
            else:
                dist.recv(buffer, 0)
                dist.send(buffer, 0)
            _synchronize(backend)
            if repeat >= WARMUP:
                round_trips.append(time.perf_counter() - start)
        medians.append(statistics.median(round_trips) / 2)
    return medians


def time_collective(fn, sizes, world_size: int, *, repeats: int = 10, backend: str = "gloo",
                    dtype: str = "float32") -> np.ndarray:
    """Seconds `fn(tensor)` takes on `world_size` ranks for a tensor of each size in bytes.

    Every rank calls fn on its own tensor of `dtype` (filled with ones); a barrier before each
    call starts the ranks together, and the rank that finishes last decides the time: the result
    is, per size, the largest over ranks of each rank's median over `repeats`.
    """
    import torch

    world_size, repeats = positive_int("world_size", world_size), positive_int("repeats", repeats)
    backend = one_of("backend", backend, BACKENDS)
    if not callable(fn):
        raise TypeError(f"fn must be a function taking one tensor, got {type(fn).__name__}")
    torch_dtype = getattr(torch, str(dtype), None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype must name a torch dtype such as 'float32', got {dtype!r}")
    sizes = _sizes("sizes", sizes, multiple_of=torch_dtype.itemsize)
    per_rank = run_ranks(_collective_rank, world_size, [(fn, sizes, repeats, backend, torch_dtype)] * world_size,
                         backend=backend)
    return np.max(np.asarray(per_rank), axis=0)


def _collective_rank(fn, sizes, repeats, backend, dtype):
    import torch
    import torch.distributed as dist

    device = rank_device(backend)
    medians = []
    for nbytes in sizes:
        tensor = torch.ones(nbytes // dtype.itemsize, dtype=dtype, device=device)
        seconds = []
        for repeat in range(WARMUP + repeats):
            dist.barrier()
            start = time.perf_counter()
            fn(tensor)
            _synchronize(backend)
            if repeat >= WARMUP:
                seconds.append(time.perf_counter() - start)
        medians.append(statistics.median(seconds))
    return medians


def _synchronize(backend: str) -> None:
    if backend == "nccl":
        import torch

        torch.cuda.synchronize()


def _sizes(name: str, sizes, multiple_of: int) -> list[int]:
    """Sizes in bytes as a list of ints >= 1, each a multiple of the element size."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"{name} must be a list of sizes in bytes, got {type(sizes).__name__}")
    sizes = [positive_int(f"{name}[{i}]", int(s) if isinstance(s, np.integer) else s) for i, s in enumerate(sizes)]
    if not sizes:
        raise ValueError(f"{name} must hold at least one size")
    for i, size in enumerate(sizes):
        if size % multiple_of:
            raise ValueError(f"{name}[{i}] = {size} bytes is not a whole number of {multiple_of}-byte elements")
    return sizes


def measured_crossover(sizes, seconds_a, seconds_b) -> float | None:
    """The size at which algorithm a, slower below it, becomes faster than b: None if that never happens here.

    Takes the last size at which a is not faster and the next one, and interpolates between them
    on log-log axes, where the two curves are nearly straight.
    """
    sizes = np.asarray(_sizes("sizes", sizes, multiple_of=1), dtype=np.float64)
    a, b = (np.asarray(s, dtype=np.float64) for s in (seconds_a, seconds_b))
    if a.shape != sizes.shape or b.shape != sizes.shape or np.any(a <= 0) or np.any(b <= 0):
        raise ValueError(f"seconds_a and seconds_b must hold one time > 0 per size ({len(sizes)}), "
                         f"got shapes {a.shape} and {b.shape}")
    if np.any(np.diff(sizes) <= 0):
        raise ValueError("sizes must increase")
    ratio = np.log(a / b)  # > 0 where a is slower
    slower = np.flatnonzero(ratio >= 0)
    if len(slower) == 0 or slower[-1] == len(sizes) - 1:
        return None  # a is faster everywhere, or is still slower at the largest size
    i = slower[-1]
    low, high = np.log(sizes[i]), np.log(sizes[i + 1])
    return float(np.exp(low + (high - low) * ratio[i] / (ratio[i] - ratio[i + 1])))
