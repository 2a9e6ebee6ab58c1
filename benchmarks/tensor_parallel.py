"""A tensor-parallel MLP (Megatron's column-then-row split) on 1, 2, 4 ... GPUs over NCCL: forward + backward time,
speed-up against ideal scaling, and the share of the step the all-reduces take.

    PYTHONPATH=src python3 benchmarks/tensor_parallel.py 1 2 4          # world sizes; one GPU per rank, NCCL
    PYTHONPATH=src python3 benchmarks/tensor_parallel.py 1 2 --cpu      # a small smoke test on gloo (no JSON)

Each world size p runs in its own processes (aisys.collectives.launch.run_ranks). Every rank builds
the whole MLP GeLU(x W1 + b1) W2 + b2 in bf16 (hidden width C, F = 4C, T tokens) from one seed, keeps
its shard, and times, with CUDA events, the median of `--reps` repetitions after a barrier (the
slowest rank's median counts):

- `aisys.parallel.tensor_parallel.tp_mlp` forward + backward from a fixed upstream gradient (the
  reference: f, two matmuls, g; one all-reduce of T x C forward, one backward);
- the same shard's compute alone, f and g left out (what the step would take with free communication);
- the two all-reduces of a step alone, on a T x C bf16 buffer (their share of the step, and the bus
  bandwidth 2 (p - 1) / p * bytes / time they reach);
- the baseline, torch's own tensor parallelism: an nn.Sequential(Linear, GELU, Linear) with the same
  weights, parallelized by `torch.distributed.tensor.parallel` (ColwiseParallel, RowwiseParallel),
  its output compared with the reference's.

Speed-up is against p = 1 of the same run (the unsharded MLP with no communication); ideal scaling is
p. The table is printed; on GPUs the rows go to book/05-parallel-training/tensor_parallel_<gpu>x<n>.json
(n, the largest world size), which the tensor-parallel page reads.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from aisys import bench
from aisys.collectives.launch import run_ranks
from aisys.parallel import tensor_parallel as tp

BOOK = Path(__file__).resolve().parents[1] / "book" / "05-parallel-training"


def _timer(device):
    """A function timing fn() `reps` times after `warmup` calls, each after a barrier: the median in seconds."""
    cuda = device.type == "cuda"

    def timed(fn, warmup: int, reps: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize(device)
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
            else:
                begin = time.perf_counter()
                fn()
                times.append(time.perf_counter() - begin)
        return statistics.median(times)

    return timed


def _slowest(seconds: float, device) -> float:
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def _torch_baseline(weights: dict, device, dtype):
    """torch's tensor parallelism on the same weights: ColwiseParallel on the first Linear, RowwiseParallel on the
    second (nn.Linear stores (out, in): the transposes of W1 and W2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    width, hidden = weights["w1"].shape
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))
    model = model.to(device=device, dtype=dtype)
    with torch.no_grad():
        model[0].weight.copy_(weights["w1"].t())
        model[0].bias.copy_(weights["b1"])
        model[2].weight.copy_(weights["w2"].t())
        model[2].bias.copy_(weights["b2"])
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def on_rank(tokens: int, width: int, hidden: int, warmup: int, reps: int, backend: str) -> dict:
    """One rank's measurements (the slowest rank's median of each)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * scale).to(dtype)

    weights = {"w1": randn(width, hidden, scale=width ** -0.5), "b1": randn(hidden, scale=0.1),
               "w2": randn(hidden, width, scale=hidden ** -0.5), "b2": randn(width, scale=0.1)}
    x, gy = randn(tokens, width).requires_grad_(), randn(tokens, width)
    shards = [s.contiguous().requires_grad_() for s in tp.shard_mlp(weights["w1"], weights["b1"], weights["w2"],
                                                                     rank, p)]
    b2 = weights["b2"].clone().requires_grad_()
    timed = _timer(device)

    def step():
        tp.tp_mlp(x, *shards, b2).backward(gy)

    def compute_only():  # the same shard's work with f and g left out
        (torch.nn.functional.gelu(x @ shards[0] + shards[1]) @ shards[2] + b2).backward(gy)

    buffer = torch.zeros(tokens, width, device=device, dtype=dtype)  # zeros: repeated in-place sums stay finite

    def allreduces():  # a step's two all-reduces: g's forward and f's backward, each of T x C
        dist.all_reduce(buffer)
        dist.all_reduce(buffer)

    result = {"world_size": p, "tokens": tokens, "width": width, "hidden": hidden, "dtype": str(dtype)[6:],
              "step_seconds": _slowest(timed(step, warmup, reps), device),
              "compute_seconds": _slowest(timed(compute_only, warmup, reps), device),
              "allreduce_seconds": _slowest(timed(allreduces, warmup, reps), device) / 2}
    try:
        model = _torch_baseline(weights, device, dtype)
        xb = x.detach().clone().requires_grad_()

        def torch_step():
            model(xb).backward(gy)

        result["torch_seconds"] = _slowest(timed(torch_step, warmup, reps), device)
        with torch.no_grad():
            ours, theirs = tp.tp_mlp(x, *shards, b2).float(), model(xb).float()
        difference = (ours - theirs).abs().max() / ours.abs().max()
        result["torch_relative_difference"] = float(difference)
    except Exception as error:  # the reference's numbers stand without the baseline; say why it is missing
        result["torch_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    return result


def row(result: dict, single: dict | None) -> dict:
    """A measured world size with the derived figures: speed-up against p = 1, the share of ideal, the all-reduces'
    share of a step and their bus bandwidth."""
    p = result["world_size"]
    out = dict(result)
    flops = 12 * result["tokens"] * result["width"] * result["hidden"]  # forward 2 matmuls x 2TCF, backward twice
    out["tflops_per_gpu"] = flops / p / result["step_seconds"] / 1e12
    out["allreduce_share"] = 2 * result["allreduce_seconds"] / result["step_seconds"]
    nbytes = result["tokens"] * result["width"] * (2 if result["dtype"] == "bfloat16" else 4)
    out["busbw"] = 2 * (p - 1) / p * nbytes / result["allreduce_seconds"] if p > 1 else None
    if single is not None:
        out["speedup"] = single["step_seconds"] / result["step_seconds"]
        out["efficiency"] = out["speedup"] / p
    return out


def table(rows: list[dict]) -> str:
    header = ("p", "step ms", "speed-up", "of ideal", "compute ms", "all-reduce ms", "AR share", "busbw GB/s",
              "TFLOP/s/GPU", "torch TP ms", "ours/torch")
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for r in rows:
        torch_ms = f"{r['torch_seconds'] * 1e3:.2f}" if "torch_seconds" in r else "failed"
        ratio = f"{r['torch_seconds'] / r['step_seconds']:.2f}x" if "torch_seconds" in r else "-"
        lines.append(" | ".join([
            str(r["world_size"]), f"{r['step_seconds'] * 1e3:.2f}", f"{r.get('speedup', float('nan')):.2f}x",
            f"{100 * r.get('efficiency', float('nan')):.0f}%", f"{r['compute_seconds'] * 1e3:.2f}",
            f"{r['allreduce_seconds'] * 1e3:.2f}", f"{100 * r['allreduce_share']:.0f}%",
            f"{r['busbw'] / 1e9:.0f}" if r["busbw"] else "-", f"{r['tflops_per_gpu']:.0f}", torch_ms, ratio]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world_sizes", type=int, nargs="*", help="world sizes (default: 1, 2, 4 up to the GPUs)")
    parser.add_argument("--tokens", type=int, default=8192, help="batch x sequence (default 8192)")
    parser.add_argument("--width", type=int, default=8192, help="hidden width C (default 8192); F = 4C")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="a smoke test on gloo with small sizes; no JSON")
    parser.add_argument("--json", type=Path, help="where to write the rows (default: next to the page)")
    args = parser.parse_args(argv)
    gpus = 0 if args.cpu or not torch.cuda.is_available() else torch.cuda.device_count()
    if gpus == 0 and not args.cpu:
        print("no GPU here: run with --cpu for a smoke test on gloo")
        return 1
    sizes = args.world_sizes or [p for p in (1, 2, 4, 8) if p <= gpus]
    if gpus and max(sizes) > gpus:
        print(f"world size {max(sizes)} needs {max(sizes)} GPUs; {gpus} here")
        return 1
    backend = "gloo" if args.cpu else "nccl"
    tokens, width = (64, 64) if args.cpu else (args.tokens, args.width)
    reps, warmup = (3, 1) if args.cpu else (args.reps, args.warmup)
    results = []
    for p in sizes:
        results.append(run_ranks(on_rank, p, [(tokens, width, 4 * width, warmup, reps, backend)] * p,
                                 backend=backend, timeout=300, wall_timeout=900)[0])
        print(f"p = {p}: step {results[-1]['step_seconds'] * 1e3:.2f} ms", flush=True)
    single = next((r for r in results if r["world_size"] == 1), None)
    rows = [row(r, single) for r in results]
    print(table(rows))
    for r in rows:
        if "torch_error" in r:
            print(f"p = {r['world_size']}: torch's tensor parallelism failed: {r['torch_error']}")
        elif r["torch_relative_difference"] > 0.05:
            print(f"p = {r['world_size']}: ours and torch's outputs differ by {r['torch_relative_difference']:.3g} "
                  "of their scale")
    if args.cpu:
        return 0
    path = args.json or BOOK / f"tensor_parallel_{bench.gpu_label(torch.cuda.get_device_name(0))}x{max(sizes)}.json"
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"rows written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
