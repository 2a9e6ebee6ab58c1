"""The reference ZeRO-3 (aisys.parallel.zero) against torch's FSDP2 (fully_shard) on one model: step time, peak memory.

    PYTHONPATH=src python3 benchmarks/zero.py 2    # 2 GPUs, NCCL: writes book/05-parallel-training/zero_<gpu>x2.json
    PYTHONPATH=src python3 benchmarks/zero.py 4    # 4 GPUs: zero_<gpu>x4.json
    PYTHONPATH=src python3 benchmarks/zero.py 2 --layers 4 --width 512   # smaller, e.g. to try it on CPU (gloo)

The model is a stack of `--layers` Linear layers of `--width` x `--width` with bias and a ReLU
between them (16 x 4096: 268 M parameters), float32, trained with AdamW on `--batch` rows per rank
and a mean-squared loss. In the same processes, one after the other, each with its peak memory
reset and measured (torch.cuda.max_memory_allocated, the largest over the ranks) and its step time
(the median over `--steps` steps after `--warmup`, of the slowest rank; a barrier before each step):

- reference ZeRO-3: the exercise's loop with aisys.parallel.zero's functions: the whole flat
  vector all-gathered before the forward pass and again before the backward pass (the forward is
  computed again with autograd there), one reduce-scatter, AdamW on the rank's shard. 3Ψ per step.
- FSDP2, one group: fully_shard on the root module only (one flat group, the reference's
  granularity).
- FSDP2, per layer: fully_shard on every Linear and then the root (what FSDP is used as): only
  one layer's parameters are whole at a time, and the next layer's all-gather overlaps compute.

FSDP1 (FullyShardedDataParallel, FULL_SHARD) stands in where fully_shard is missing. Prints a
table with the ratios to FSDP2 per layer and the ZeRO formula's model states per GPU (16Ψ/N in
fp32 with Adam: 4 + 4 + 8 bytes), and writes JSON next to the chapter's ZeRO page.
"""

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from aisys import bench
from aisys.collectives.launch import rank_device, run_ranks
from aisys.device import gpu_count
from aisys.parallel import zero

ROOT = Path(__file__).resolve().parents[1]


def _layers(width: int, count: int, device, seed: int = 0) -> list:
    """The same initial weights and biases on every rank: [W1, b1, W2, b2, ...]."""
    torch.manual_seed(seed)
    tensors = []
    for _ in range(count):
        tensors.append(torch.randn(width, width, device=device) / math.sqrt(width))
        tensors.append(torch.zeros(width, device=device))
    return tensors


def _forward(weights: list, x):
    for i in range(0, len(weights), 2):
        x = torch.nn.functional.linear(x, weights[i], weights[i + 1])
        if i + 2 < len(weights):
            x = torch.relu(x)
    return x


def _timed(step, steps: int, warmup: int, device) -> tuple[list[float], int, float]:
    """Seconds of each timed step (a barrier before each), the peak bytes allocated while stepping, the last loss."""
    torch.cuda.reset_peak_memory_stats(device) if device.type == "cuda" else None
    times, loss = [], None
    for i in range(warmup + steps):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        loss = step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return times, peak, float(loss)


def _reference(width, layers, x, target, hyper):
    state = zero.init_state(_layers(width, layers, x.device), 3)  # the full initial weights are dropped here

    def step():
        weights = zero.gather_parameters(state)
        with torch.no_grad():
            _forward(weights, x)
        weights = None
        weights = zero.gather_parameters(state)
        loss = ((_forward(weights, x) - target) ** 2).mean()
        grads = list(torch.autograd.grad(loss, weights))
        weights = None
        zero.reduce_gradients(state, grads)
        grads = None
        zero.adamw_step(state, **hyper)
        return loss.detach()

    return step


def _fsdp(width, layers, x, target, hyper, per_layer: bool):
    device, modules = x.device, []
    tensors = _layers(width, layers, device)
    for i in range(layers):
        linear = torch.nn.Linear(width, width, device=device)
        with torch.no_grad():
            linear.weight.copy_(tensors[2 * i])
            linear.bias.copy_(tensors[2 * i + 1])
        modules.append(linear)
        if i + 1 < layers:
            modules.append(torch.nn.ReLU())
    tensors = None
    model = torch.nn.Sequential(*modules)
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        fully_shard = None
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            pass
    if fully_shard is not None:
        if per_layer:
            for module in model:
                if isinstance(module, torch.nn.Linear):
                    fully_shard(module)
        fully_shard(model)
        kind = "FSDP2"
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        policy = ModuleWrapPolicy({torch.nn.Linear}) if per_layer else None
        model = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         auto_wrap_policy=policy, device_id=device, use_orig_params=True)
        kind = "FSDP1"
    optimizer = torch.optim.AdamW(model.parameters(), lr=hyper["lr"], betas=hyper["betas"], eps=hyper["eps"],
                                  weight_decay=hyper["weight_decay"])

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    step.kind = kind
    return step


def _on_rank(width, layers, batch, steps, warmup) -> list[dict]:
    warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 renames all_gather_into_tensor and the like
    device = rank_device(dist.get_backend())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    hyper = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    results = []
    generator = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own rows
    x = torch.randn(batch, width, generator=generator).to(device)
    target = torch.randn(batch, width, generator=generator).to(device)
    for name in ("reference ZeRO-3", "FSDP one group", "FSDP per layer"):
        if name.startswith("reference"):
            step = _reference(width, layers, x, target, hyper)
            kind = "reference"
        else:
            step = _fsdp(width, layers, x, target, hyper, per_layer=name.endswith("layer"))
            kind = step.kind
            name = name.replace("FSDP", kind)
        times, peak, loss = _timed(step, steps, warmup, device)
        results.append({"name": name, "kind": kind, "seconds": statistics.median(times), "peak_bytes": peak,
                        "loss": loss})
        step = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _gpu_label(world_size: int) -> str:
    if not torch.cuda.is_available():
        return f"cpux{world_size}"
    return f"{bench.gpu_label(torch.cuda.get_device_name(0))}x{world_size}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world_size", type=int, nargs="?", default=2, help="ranks: GPUs with NCCL (default 2)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8, help="rows per rank")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path, help="default: book/05-parallel-training/zero_<gpu>x<n>.json")
    args = parser.parse_args(argv)
    gpus = gpu_count()
    backend = "nccl" if gpus >= args.world_size else "gloo"
    if backend == "gloo":
        print(f"fewer than {args.world_size} GPUs here: gloo on the CPU, no memory figures")
    per_rank = run_ranks(_on_rank, args.world_size,
                         [(args.width, args.layers, args.batch, args.steps, args.warmup)] * args.world_size,
                         backend=backend, timeout=600, wall_timeout=3600)
    psi = args.layers * (args.width * args.width + args.width)
    n = args.world_size
    predicted = zero.memory_per_gpu(psi, n, 3, k=8, parameter_bytes=4, gradient_bytes=4)
    rows = []
    for i, first in enumerate(per_rank[0]):
        rows.append({"name": first["name"], "kind": first["kind"],
                     "seconds": max(r[i]["seconds"] for r in per_rank),
                     "peak_bytes": max(r[i]["peak_bytes"] for r in per_rank),
                     "loss": first["loss"], "predicted_model_state_bytes": predicted})
    baseline = rows[-1]
    for row in rows:
        row["time_ratio"] = row["seconds"] / baseline["seconds"]
        row["memory_ratio"] = row["peak_bytes"] / baseline["peak_bytes"] if baseline["peak_bytes"] else None
    device = torch.cuda.get_device_name(0) if backend == "nccl" else "CPU"
    print(f"{device} x{n} ({backend}), {args.layers} x Linear({args.width}, {args.width}): Ψ = {psi / 1e6:.0f} M "
          f"parameters, float32, AdamW, {args.batch} rows per rank; ZeRO-3 model states 16Ψ/N = "
          f"{predicted / 2**30:.2f} GiB per GPU")
    print(f"{'':<22}{'step ms':>10}{'x FSDP/layer':>14}{'peak GiB':>10}{'x FSDP/layer':>14}{'/ 16Ψ/N':>9}")
    for row in rows:
        memory = (f"{row['peak_bytes'] / 2**30:>10.2f}{row['memory_ratio']:>14.2f}"
                  f"{row['peak_bytes'] / predicted:>9.2f}") if row["peak_bytes"] else f"{'-':>10}{'-':>14}{'-':>9}"
        print(f"{row['name']:<22}{row['seconds'] * 1e3:>10.1f}{row['time_ratio']:>14.2f}{memory}"
              f"   rank 0's loss after {args.warmup + args.steps} steps: {row['loss']:.6g}")
    agree = all(math.isclose(row["loss"], baseline["loss"], rel_tol=1e-3) for row in rows)  # fp32, other orders
    print("the losses agree (same weights, rows and AdamW)" if agree else "THE LOSSES DIFFER")
    if backend == "nccl":
        path = args.json or ROOT / "book" / "05-parallel-training" / f"zero_{_gpu_label(n)}.json"
        path.write_text(json.dumps({"device": device, "world_size": n, "backend": backend,
                                    "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                                    "layers": args.layers, "width": args.width, "batch": args.batch,
                                    "steps": args.steps, "dtype": "float32", "parameters": psi,
                                    "losses_agree": agree, "rows": rows},
                                   indent=1) + "\n")
        print(f"written to {path}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
