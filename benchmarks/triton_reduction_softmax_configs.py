"""Launch configurations of the reference Triton reduction and softmax on a GPU, each against torch in the same run.

    PYTHONPATH=src python3 benchmarks/triton_reduction_softmax_configs.py [FOLDER]   # FOLDER for the JSON; default /tmp

The defaults in aisys.triton_kernels (reduction.GPU, softmax.num_warps_for) are a choice among these; this
script shows what the others give, so that a default can be changed on evidence:

- the sum of 2**28 float32 (and 2**27 bfloat16) for blocks of 2048 to 8192 elements, 4 to 16 warps and 4 to 16
  programs per multiprocessor, against torch.sum;
- softmax over 4096 rows of 4096, 8192 and 16384 columns, float32 and bfloat16, the fused kernel with 4 to 32
  warps, against torch.softmax.

Measured with aisys.bench (CUDA events, L2 flushed, inputs in rotation). On a CPU it runs one configuration of
each at small sizes in the interpreter, for correctness only.
"""

import dataclasses
import json
import sys
import warnings
from pathlib import Path

import torch

from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels import reduction, softmax

REDUCTION_CONFIGS = [reduction.Config(block, warps, per_sm)
                     for block, warps in [(2048, 4), (2048, 8), (4096, 4), (4096, 8), (4096, 16), (8192, 8),
                                          (8192, 16)]
                     for per_sm in (4, 8, 16)]
SOFTMAX_WARPS = (4, 8, 16, 32)
SOFTMAX_SHAPES = [(4096, 4096), (4096, 8192), (4096, 16384)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def benchmarks(gpu: bool) -> list[tuple[Benchmark, list]]:
    dev = "cuda" if gpu else "cpu"
    configs = REDUCTION_CONFIGS if gpu else [reduction.CPU]
    out = []
    for tag, dtype, n in [("fp32", torch.float32, 2**28), ("bf16", torch.bfloat16, 2**27)]:
        sizes = [n] if gpu else [5000]
        for config in configs:
            name = f"sum {tag} block={config.block} warps={config.num_warps} per_sm={config.programs_per_sm}"
            out.append((Benchmark(name, lambda x, c=config: reduction.vector_sum(x, c), torch.sum,
                                  make_inputs=lambda n, d=dtype: torch.rand(n, device=dev).to(d)), sizes))
    for tag, dtype in DTYPES.items():
        for warps in SOFTMAX_WARPS if gpu else (4,):
            out.append((Benchmark(f"softmax {tag} warps={warps}", lambda x, w=warps: softmax.softmax_rows(x, w),
                                  lambda x: torch.softmax(x, dim=-1),
                                  make_inputs=lambda shape, d=dtype: (4 * torch.randn(shape, device=dev)).to(d)),
                        SOFTMAX_SHAPES if gpu else [(3, 1000)]))
    return out


def main(folder: Path) -> None:
    gpu = device.current() == "cuda"
    print(device.describe())
    copy = bench.measure_copy_bandwidth() if gpu else None
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bench.NotAGPUWarning)
        for benchmark, sizes in benchmarks(gpu):
            rows += bench.measure([benchmark], sizes, copy_bandwidth=copy)
    print(bench.table(rows))
    best = {}
    for row in rows:
        group = " ".join(row.name.split()[:2]) + f" {bench.size_label(row.size)}"
        if row.speedup is not None and (group not in best or row.speedup > best[group].speedup):
            best[group] = row
    for group, row in best.items():
        print(f"best for {group}: {row.name}, {row.speedup:.3f}x torch")
    path = folder / "triton_reduction_softmax_configs.json"
    path.write_text(json.dumps([dataclasses.asdict(row) for row in rows], default=str, indent=1))
    print(f"rows saved to {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp"))
