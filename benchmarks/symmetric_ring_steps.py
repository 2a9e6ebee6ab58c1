"""Where a step of the ring in symmetric memory spends its time, on every GPU here: a barrier, a chunk added from
the predecessor's memory, a chunk copied from it, a chunk added from this GPU's own memory, and the whole all-reduce.

    PYTHONPATH=src python3 benchmarks/symmetric_ring_steps.py

Each rank holds an aisys.collectives.symmetric_ring.SymmetricRing of 64 MiB, then of 256 MiB (float32). Every
operation runs 20 times back to back on all ranks at once, as a ring step does, after 3 warm-up runs, a
process-group barrier and a GPU spin that hides the host's launches; its time is the slowest rank's mean. "peer
add" and "peer copy" move one chunk (a p-th of the buffer) from the predecessor over NVLink; "local add" is the
same addition with both operands in this GPU's memory, the cost a step would have without the link. "all_reduce"
is the whole ring with a barrier between steps, "one kernel" the same ring in one kernel ordered by flags. The book's
ring page reads book/06-collectives/symmetric_ring_steps_4gpu_h100.txt, this script's output on 4 H100s.
"""

import sys

import torch
import torch.distributed as dist
from aisys.collectives.launch import run_ranks
from aisys.collectives.symmetric_ring import SymmetricRing
from aisys.device import gpu_count

SIZES = (2**24, 2**26)  # float32 elements: 64 MiB and 256 MiB
REPEATS, WARMUP = 20, 3
SPIN_CYCLES = 2_000_000  # about 1 ms: longer than the host takes to queue the repeats


def time_steps(numel: int) -> dict:
    ring = SymmetricRing.on_gpus(numel)
    chunk = numel // ring.world_size
    mine, theirs = ring.buffer[:chunk], ring.previous[chunk:2 * chunk]
    local = torch.empty(chunk, device="cuda")
    ring.buffer.fill_(1.0)
    operations = {"barrier": ring.barrier, "peer add": lambda: mine.add_(theirs),
                  "peer copy": lambda: mine.copy_(theirs), "local add": lambda: mine.add_(local),
                  "all_reduce": ring.all_reduce, "one kernel": ring.all_reduce_in_one_kernel}
    microseconds = {}
    for name, operation in operations.items():
        for _ in range(WARMUP):
            operation()
        dist.barrier()
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPEATS):
            operation()
        end.record()
        end.synchronize()
        microseconds[name] = start.elapsed_time(end) / REPEATS * 1e3
    return microseconds


def main() -> int:
    gpus = gpu_count()
    if gpus < 2:
        raise SystemExit(f"symmetric_ring_steps.py times the ring in GPU symmetric memory: it needs 2 or more GPUs, "
                         f"found {gpus}")
    for numel in SIZES:
        per_rank = run_ranks(time_steps, gpus, [(numel,)] * gpus, backend="nccl", timeout=60, wall_timeout=120)
        chunk_bytes = numel * 4 // gpus
        for name in per_rank[0]:
            us = max(rank[name] for rank in per_rank)
            moved = f"  {chunk_bytes / us / 1e3:.0f} GB/s of chunk" if "add" in name or "copy" in name else ""
            print(f"{numel * 4 >> 20} MiB on {gpus}: {name:10s} {us:8.1f} us{moved}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
