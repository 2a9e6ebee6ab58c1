"""The reference ring all-reduce against dist.all_reduce (NCCL on GPUs, gloo on CPU), bus bandwidth by message size.

    PYTHONPATH=src python3 benchmarks/allreduce.py [--json PATH]                # every GPU, NCCL, 1 KiB .. 1 GiB
    PYTHONPATH=src python3 benchmarks/allreduce.py --world-size 4 [--json PATH] # on CPU: gloo, 1 KiB .. 16 MiB

On GPUs the world size is the number of GPUs (one rank each). Both algorithms run on the same
float32 buffer in the same processes (aisys.collectives.allreduce_bench): warm-up, a barrier before
each timed repetition, CUDA events, the median over repetitions and the slowest rank. The ring is
aisys.collectives.ring.all_reduce without its size check (the bare algorithm). Prints one
table (size, both times, both bus bandwidths, their ratio, the ring's busbw as a share of the link's
one-way bandwidth) and the issue's target: the ring at >= 0.6x NCCL's busbw for messages >= 64 MiB
on 2 GPUs. --json writes the rows; the book's ring page reads book/06-collectives/allreduce_h200.json.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from aisys.collectives import allreduce_bench

TARGET = (64 * allreduce_bench.MIB, 0.6)  # from this size on, the ring's busbw over NCCL's


def gpus() -> int:
    """GPUs usable here (torch.cuda.device_count does not initialise CUDA, which the forked ranks need)."""
    if os.environ.get("AISYS_DEVICE") == "cpu":
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, help="ranks on CPU (default 2); on GPUs the number of GPUs")
    parser.add_argument("--max-bytes", type=int, help="largest message (default 1 GiB on GPUs, 16 MiB on CPU)")
    parser.add_argument("--reps", type=int, help="timed repetitions per size (default 20 on GPUs, 5 on CPU)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    count = gpus()
    backend = "nccl" if count >= 2 else "gloo"
    world_size = count if backend == "nccl" else (args.world_size or 2)
    sizes = [s for s in allreduce_bench.sweep(backend) if args.max_bytes is None or s <= args.max_bytes]
    reps = args.reps or (20 if backend == "nccl" else 5)
    if backend == "gloo":
        print("no 2 GPUs here: the ring against gloo's all_reduce, processes on this CPU over loopback")
    rows = allreduce_bench.compare(sizes, world_size, backend=backend, reps=reps)
    print(allreduce_bench.table(rows))
    large = [r for r in rows if r["bytes"] >= TARGET[0]]
    if backend == "nccl" and world_size == 2 and large:
        worst = min(r["ratio"] for r in large)
        print(f"target: ring busbw >= {TARGET[1]}x NCCL's from {allreduce_bench.size_label(TARGET[0])} on 2 GPUs: "
              f"{'met' if worst >= TARGET[1] else 'MISSED'} (lowest ratio {worst:.2f})")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
        print(f"rows written to {args.json}")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
