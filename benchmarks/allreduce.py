"""The reference ring all-reduce against dist.all_reduce (NCCL on GPUs, gloo on CPU), bus bandwidth by message size.

    PYTHONPATH=src python3 benchmarks/allreduce.py [--json PATH]                # every GPU, NCCL, 1 KiB .. 1 GiB
    PYTHONPATH=src python3 benchmarks/allreduce.py --world-size 4 [--json PATH] # on CPU: gloo, 1 KiB .. 16 MiB
    PYTHONPATH=src python3 benchmarks/allreduce.py --settings [--json PATH]     # GPUs: the tuned ring's settings
    PYTHONPATH=src python3 benchmarks/allreduce.py --symmetric [--json PATH]    # GPUs: the ring in symmetric memory

On GPUs the world size is the number of GPUs (one rank each). Both algorithms run on the same
float32 buffer in the same processes (aisys.collectives.allreduce_bench): warm-up, a barrier before
each timed repetition, CUDA events, the median over repetitions and the slowest rank. The ring is
aisys.collectives.ring.all_reduce without its size check (the bare algorithm). On GPUs a third is
timed too, the tuned ring (aisys.collectives.pipelined_ring: slices pipelined with their additions, 8
communicators as channels, captured in a CUDA graph), and an ablation at 64 MiB and 1 GiB adds
its steps one at a time. Prints the table (size, times, bus bandwidths, ratios to NCCL, the ring's busbw
as a share of the link's one-way bandwidth), the ablation, and the targets: the readable ring at >= 0.6x
NCCL's busbw from 64 MiB on 2 GPUs, the tuned ring at >= 0.9x from 64 MiB on any number of GPUs.
--json writes the rows; the book's ring page reads book/06-collectives/allreduce_h200.json and
allreduce_tuned_<gpus>gpu_h100.json.

--settings runs, instead, the sweep of what else might close the gap at 64 MiB and 256 MiB
(allreduce_bench.settings_sweep): the captured ring at each (channels, slices) in SETTINGS, once
with NCCL's defaults and once with NCCL_MIN_P2P_NCHANNELS=64 (twice the p2p channels per
operation on 4 ranks), each against NCCL in the same processes; the page reads
allreduce_settings_4gpu_h100.json.

--symmetric runs, instead, the rings on symmetric memory (aisys.collectives.symmetric_ring, in PyTorch's symmetric
memory): "symmetric", whose every step is one kernel reading the neighbour's chunk over NVLink with a barrier
between steps, and "one kernel", the whole ring in one Triton kernel ordered per slice by flags
(aisys.triton_kernels.ring_all_reduce). Both against NCCL, the readable ring and the tuned ring, all on the same
symmetric buffer in the same processes (with NCCL_GRAPH_REGISTER=0: allreduce_bench.compare says why), from 16 MiB
to 1 GiB, with the same >= 0.9x target; the page reads allreduce_symmetric_<gpus>gpu_h100.json. On CPU the default
run times the first too, on files the ranks share.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from aisys.collectives import allreduce_bench
from aisys.device import gpu_count

TARGET = (64 * allreduce_bench.MIB, 0.6)  # from this size on, the ring's busbw over NCCL's
TUNED_TARGET = 0.9  # the tuned ring's, from the same size
ABLATION_SIZES = (64 * allreduce_bench.MIB, allreduce_bench.GIB)
SETTINGS_SIZES = (64 * allreduce_bench.MIB, 256 * allreduce_bench.MIB)
SETTINGS_ENVIRONMENTS = ({}, {"NCCL_MIN_P2P_NCHANNELS": "64"})
SYMMETRIC_SIZES = tuple(allreduce_bench.MIB * 2**k for k in (4, 6, 8, 10))  # 16 MiB .. 1 GiB


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, help="ranks on CPU (default 2); on GPUs the number of GPUs")
    parser.add_argument("--max-bytes", type=int, help="largest message (default 1 GiB on GPUs, 16 MiB on CPU)")
    parser.add_argument("--min-bytes", type=int, help="smallest message (default 1 KiB)")
    parser.add_argument("--reps", type=int, help="timed repetitions per size (default 20 on GPUs, 5 on CPU)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--settings", action="store_true",
                        help="only the tuned ring's (channels, slices) sweep against NCCL, on GPUs")
    parser.add_argument("--symmetric", action="store_true",
                        help="only the ring in symmetric memory against NCCL and the readable ring, on GPUs")
    args = parser.parse_args(argv)
    count = gpu_count()
    if args.settings:
        return settings(count, args.reps or 10, args.json)
    if args.symmetric:
        return symmetric(count, args.reps or 10, args.json)
    backend = "nccl" if count >= 2 else "gloo"
    world_size = count if backend == "nccl" else (args.world_size or 2)
    sizes = [s for s in allreduce_bench.sweep(backend) if args.max_bytes is None or s <= args.max_bytes]
    sizes = [s for s in sizes if args.min_bytes is None or s >= args.min_bytes]
    reps = args.reps or (20 if backend == "nccl" else 5)
    if backend == "gloo":
        print("no 2 GPUs here: the ring against gloo's all_reduce, processes on this CPU over loopback")
    nccl = backend == "nccl"
    rows = allreduce_bench.compare(sizes, world_size, backend=backend, reps=reps,
                                   extra=(allreduce_bench.TUNED,) if nccl else (allreduce_bench.SYMMETRIC,))
    print(allreduce_bench.table(rows))
    ablation = []
    if nccl:
        ablation = allreduce_bench.compare([s for s in ABLATION_SIZES if s in sizes], world_size, backend=backend,
                                           reps=reps, extra=allreduce_bench.ABLATION)
        print("\nFrom the readable ring to the tuned one, a step at a time (busbw, and its share of NCCL's):")
        print(allreduce_bench.ablation_table(ablation) if ablation else "(no ablation sizes in this sweep)")
    large = [r for r in rows if r["bytes"] >= TARGET[0]]
    if nccl and world_size == 2 and large:
        worst = min(r["ratio"] for r in large)
        print(f"target: ring busbw >= {TARGET[1]}x NCCL's from {allreduce_bench.size_label(TARGET[0])} on 2 GPUs: "
              f"{'met' if worst >= TARGET[1] else 'MISSED'} (lowest ratio {worst:.2f})")
    if nccl and large:
        worst = min(r[f"{allreduce_bench.TUNED}_ratio"] for r in large)
        print(f"target: tuned ring busbw >= {TUNED_TARGET}x NCCL's from {allreduce_bench.size_label(TARGET[0])} on "
              f"{world_size} GPUs: {'met' if worst >= TUNED_TARGET else 'MISSED'} (lowest ratio {worst:.2f})")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ablation": ablation, "nccl": nccl_version()}, indent=1) + "\n")
        print(f"rows written to {args.json}")
    return 0 if all(r["correct"] for r in rows + ablation) else 1


def settings(count: int, reps: int, path: Path | None) -> int:
    if count < 2:
        raise SystemExit("--settings times the captured ring against NCCL: it needs 2 or more GPUs, found "
                         f"{count}")
    rows = [row for env in SETTINGS_ENVIRONMENTS
            for row in allreduce_bench.settings_sweep(SETTINGS_SIZES, count, nccl_env=env, reps=reps)]
    print(allreduce_bench.settings_table(rows))
    if path:
        path.write_text(json.dumps({"settings": rows, "nccl": nccl_version()}, indent=1) + "\n")
        print(f"rows written to {path}")
    return 0 if all(r["correct"] for r in rows) else 1


def symmetric(count: int, reps: int, path: Path | None) -> int:
    if count < 2:
        raise SystemExit("--symmetric times the ring in GPU symmetric memory against NCCL: it needs 2 or more GPUs, "
                         f"found {count}")
    rows = allreduce_bench.compare(SYMMETRIC_SIZES, count, backend="nccl", reps=reps,
                                   extra=(allreduce_bench.TUNED, *allreduce_bench.ON_SYMMETRIC_MEMORY))
    print(allreduce_bench.table(rows))
    print("(NCCL_GRAPH_REGISTER=0 in this run: without it the tuned ring, captured on symmetric memory, hangs)")
    for name in (allreduce_bench.TUNED, *allreduce_bench.ON_SYMMETRIC_MEMORY):
        worst = min(r[f"{name}_ratio"] for r in rows if r["bytes"] >= TARGET[0])
        print(f"target: {name} busbw >= {TUNED_TARGET}x NCCL's from {allreduce_bench.size_label(TARGET[0])} on "
              f"{count} GPUs: {'met' if worst >= TUNED_TARGET else 'MISSED'} (lowest ratio {worst:.2f})")
    if path:
        path.write_text(json.dumps({"rows": rows, "nccl": nccl_version()}, indent=1) + "\n")
        print(f"rows written to {path}")
    return 0 if all(r["correct"] for r in rows) else 1


def nccl_version() -> str | None:
    return ".".join(map(str, torch.cuda.nccl.version())) if gpu_count() >= 2 else None


if __name__ == "__main__":
    sys.exit(main())
