"""The reference DDP (aisys.parallel.ddp) against torch's DistributedDataParallel: step time and communication hidden.

    PYTHONPATH=src python3 benchmarks/ddp.py 2      # 2 GPUs over NCCL
    PYTHONPATH=src python3 benchmarks/ddp.py 4      # 4 GPUs
    PYTHONPATH=src python3 benchmarks/ddp.py 2 --layers 8 --width 4096 --batch 1024 --dtype float32 --cap-mb 25

Every rank builds the same model (a stack of `layers` Linear(width, width) + GELU, bf16 by
default: 16 x 4096^2 weights, 0.54 GB in bf16), three copies of it: one plain, one with the
reference DDP's hooks (buckets of --cap-mb MiB), one wrapped in torch.nn.parallel.
DistributedDataParallel with bucket_cap_mb the same (torch additionally caps its first bucket at
1 MiB, dist._DEFAULT_FIRST_BUCKET_BYTES; ours caps every bucket alike). Each rank has its own
random batch. Timed, with CUDA events around each repetition after a barrier, the median over
repetitions, then the slowest rank:

    backward alone   forward + backward of the plain copy: no communication
    comm alone       the reference's buckets (same sizes) all-reduced back to back, no computation
    reference DDP    forward + backward + ddp_finish
    torch DDP        forward + backward of the DDP-wrapped copy

The share of communication hidden behind backward is (backward alone + comm alone - step) / comm
alone, clipped to [0, 1], for each DDP. The goal: the reference at >= 0.9x torch's speed (torch's
step time / ours). Both DDPs' gradients are compared after one step on the same batch. Prints a
table; writes book/05-parallel-training/ddp_<gpu>x<n>.json (or --json PATH), which the
data-parallel page reads.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from aisys import bench
from aisys.collectives.launch import run_ranks
from aisys.device import gpu_count

BOOK = Path(__file__).resolve().parent.parent / "book" / "05-parallel-training"
GOAL = 0.9  # the reference's speed as a fraction of torch's DDP
DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}


def _model(layers: int, width: int, dtype, device):
    torch.manual_seed(0)  # the same weights on every rank, as DDP's broadcast at wrapping would make them
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks).to(device=device, dtype=dtype)


def _timed(step, reps: int, warmup: int) -> list[float]:
    import torch.distributed as dist

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    return seconds


def _on_rank(layers: int, width: int, batch: int, dtype_name: str, cap_bytes: int, reps: int, warmup: int) -> dict:
    import copy

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from aisys.collectives.launch import rank_device
    from aisys.parallel import ddp

    device, dtype = rank_device("nccl"), DTYPES[dtype_name]
    plain = _model(layers, width, dtype, device)
    ours = copy.deepcopy(plain)
    theirs = DistributedDataParallel(copy.deepcopy(plain), device_ids=[device.index],
                                     bucket_cap_mb=cap_bytes / 2**20)
    state = ddp.ddp_attach(list(ours.parameters()), cap_bytes)
    generator = torch.Generator(device=device).manual_seed(1 + dist.get_rank())
    x = torch.randn(batch, width, device=device, dtype=dtype, generator=generator)

    def forward_backward(model):
        model.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()

    def reference_step():
        forward_backward(ours)
        ddp.ddp_finish(state)

    flats = [torch.empty(sum(state["params"][i].numel() for i in bucket), device=device, dtype=dtype)
             for bucket in state["buckets"]]

    def comm_alone():
        for work in [dist.all_reduce(flat, async_op=True) for flat in flats]:
            work.wait()

    reference_step()  # one step each on the same batch: the averaged gradients must agree
    forward_backward(theirs)
    torch.cuda.synchronize()
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4  # bf16 keeps 8 bits: sums in other orders differ
    agree = all(torch.allclose(a.grad.float(), b.grad.float(), rtol=tolerance, atol=tolerance)
                for a, b in zip(ours.parameters(), theirs.module.parameters()))
    seconds = {"backward alone": _timed(lambda: forward_backward(plain), reps, warmup),
               "comm alone": _timed(comm_alone, reps, warmup),
               "reference DDP": _timed(reference_step, reps, warmup),
               "torch DDP": _timed(lambda: forward_backward(theirs), reps, warmup)}
    return {"seconds": {name: statistics.median(times) for name, times in seconds.items()}, "agree": agree,
            "device": torch.cuda.get_device_name(device), "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "params": sum(p.numel() for p in plain.parameters()),
            "bytes": sum(p.numel() * p.element_size() for p in plain.parameters()),
            "bucket_bytes": [f.numel() * f.element_size() for f in flats]}


def hidden(compute: float, comm: float, step: float) -> float:
    """The share of the communication time that the step did not add to backward's, in [0, 1]."""
    return min(1.0, max(0.0, (compute + comm - step) / comm)) if comm > 0 else 1.0


def table(result: dict) -> str:
    s = result["seconds"]
    lines = [f"{'':16} {'ms':>9}  {'vs torch DDP':>12}  {'comm hidden':>11}"]
    for name in ("backward alone", "comm alone", "reference DDP", "torch DDP"):
        against = f"{s['torch DDP'] / s[name]:.2f}x speed" if "DDP" in name else ""
        share = f"{hidden(s['backward alone'], s['comm alone'], s[name]):.0%}" if "DDP" in name else ""
        lines.append(f"{name:16} {s[name] * 1e3:9.3f}  {against:>12}  {share:>11}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world_size", type=int, help="GPUs, one rank each (2 or 4)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2048, help="rows of each rank's batch")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--cap-mb", type=float, default=25.0, help="bucket cap in MiB, both DDPs")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", type=Path, help="default: book/05-parallel-training/ddp_<gpu>x<n>.json")
    args = parser.parse_args(argv)
    count = gpu_count()
    if count < args.world_size:
        print(f"needs {args.world_size} GPUs, found {count}: nothing measured")
        return 2
    cap_bytes = int(args.cap_mb * 2**20)
    per_rank = run_ranks(_on_rank, args.world_size,
                         [(args.layers, args.width, args.batch, args.dtype, cap_bytes, args.reps, args.warmup)]
                         * args.world_size, backend="nccl", timeout=300, wall_timeout=600)
    first = per_rank[0]
    seconds = {name: max(rank["seconds"][name] for rank in per_rank) for name in first["seconds"]}
    result = {key: first[key] for key in ("device", "nccl", "params", "bytes", "bucket_bytes")}
    result.update(world_size=args.world_size, dtype=args.dtype, layers=args.layers, width=args.width,
                  batch=args.batch, cap_bytes=cap_bytes, reps=args.reps, seconds=seconds,
                  agree=all(rank["agree"] for rank in per_rank))
    speed = seconds["torch DDP"] / seconds["reference DDP"]
    result.update(speed_vs_torch=speed, goal=GOAL, met=speed >= GOAL,
                  hidden_reference=hidden(seconds["backward alone"], seconds["comm alone"], seconds["reference DDP"]),
                  hidden_torch=hidden(seconds["backward alone"], seconds["comm alone"], seconds["torch DDP"]))
    result["table"] = table(result)
    print(f"{result['device']} x {args.world_size}, NCCL {result['nccl']}, {args.dtype}, "
          f"{result['params'] / 1e6:.0f}M parameters ({result['bytes'] / 2**20:.0f} MiB), "
          f"{len(result['bucket_bytes'])} buckets of <= {args.cap_mb:g} MiB (+ torch's 1 MiB first bucket)")
    print(result["table"])
    print(f"gradients of the two DDPs after one step {'agree' if result['agree'] else 'DISAGREE'}")
    print(f"goal: reference >= {GOAL}x torch DDP's speed: {'met' if result['met'] else 'MISSED'} ({speed:.2f}x)")
    path = args.json or BOOK / f"ddp_{bench.gpu_label(result['device'])}x{args.world_size}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {path}")
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
