"""The reference Triton kernels against torch's own ops on a GPU, as fractions of the device's limits.

    PYTHONPATH=src python3 benchmarks/triton_kernels.py [FOLDER]     # FOLDER for the plots and rows; default /tmp

Measured with aisys.bench (CUDA events, L2 flushed before each repetition, inputs in rotation, torch's op
timed by the same code in the same run), against the copy bandwidth measured at the start:

- reduction: the sum (and max) of a vector up to 2**28 float32 vs torch.sum / torch.amax; row sums;
- softmax and LayerNorm (and RMSNorm) over 4096 rows of 4096, 8192 and 16384 columns (and 1024 rows of
  65536, past the single-block path), float32 and bfloat16, vs torch.softmax / F.layer_norm / F.rms_norm;
  the norms in rows named "... readable" (`tuned=False`: the row kernel, or past one block the readable loop);
- the fused elementwise chain (bias + GELU + residual) vs the same chain as separate torch ops;
- "layer_norm fp32 tuned" (and rms_norm, and bf16): the default, which past one block runs the autotuned looping
  kernels (column block, warps, eviction hints, programs per SM), at 1024 x 65536 beside the readable rows of
  the same run, and a side-by-side table of the two (below one block both run the same row kernel).

Prints one table per group, the issue's targets met or missed (vector sum >= 0.95x torch.sum's speed,
softmax and LayerNorm >= 1.0x torch for rows >= 4096), and saves FOLDER/triton_<group>.png for each group
and FOLDER/triton_kernels.json with every row. On a CPU it runs each kernel once at small sizes, in the
Triton interpreter, for correctness only: no GPU is measured, and the output says so.
"""

import dataclasses
import json
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels import fused, layernorm, reduction, softmax  # on a CPU: Triton's interpreter

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ROWS_SHAPES = [(4096, 4096), (4096, 8192), (4096, 16384), (1024, 65536)]
TARGETS = {"vector sum": 0.95, "softmax": 1.0, "layer_norm": 1.0}  # kernel name prefix -> least speed vs torch
TARGET_MIN_COLS = 4096
TARGET_MIN_LOG2_N = 26  # smaller vectors measure launches more than bandwidth


def groups(dev: str) -> dict[str, list[tuple[Benchmark, list]]]:
    """Each group: (benchmark, sizes) pairs, at GPU sizes on a GPU and small ones in the interpreter."""
    gpu = dev == "cuda"
    vectors = [2**20, 2**24, 2**26, 2**28] if gpu else [2**12, 5000]
    matrices = ROWS_SHAPES if gpu else [(4, 512), (3, 1000)]

    def vector(n):
        return torch.rand(n, device=dev)  # positive: the sum of 2**28 is large against its rounding error

    def rows_of(dtype, scale=1.0, params=0):
        """make_inputs for (rows, cols): x of `dtype` with `params` vectors of cols (weight, bias) after it."""
        def make(shape):
            x = (scale * torch.randn(shape, device=dev)).to(dtype)
            return (x, *(torch.randn(shape[1], device=dev).to(dtype) for _ in range(params)))
        return make

    out = {
        "reduction": [
            (Benchmark("vector sum", reduction.vector_sum, torch.sum, make_inputs=vector), vectors),
            (Benchmark("vector max", reduction.vector_max, torch.amax, make_inputs=vector), vectors[-1:]),
            (Benchmark("row sums", reduction.row_sums, lambda a: torch.sum(a, dim=1),
                       make_inputs=lambda shape: torch.rand(shape, device=dev)), matrices[:3:2]),
        ],
        "softmax": [], "layernorm": [],
    }
    for tag, dtype in DTYPES.items():
        out["softmax"].append((Benchmark(f"softmax {tag}", softmax.softmax, lambda x: torch.softmax(x, dim=-1),
                                         make_inputs=rows_of(dtype, scale=4.0)), matrices))
        long_rows = matrices[-1:] if gpu else [(2, 33000)]  # past one block in both dtypes: the tuned loop runs
        for tuned, suffix, sizes in ((False, " readable", matrices), (True, " tuned", long_rows)):
            out["layernorm"] += [
                (Benchmark(f"layer_norm {tag}{suffix}",
                           lambda x, w, b, tuned=tuned: layernorm.layer_norm(x, w, b, 1e-5, tuned=tuned),
                           lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
                           make_inputs=rows_of(dtype, params=2)), sizes),
                (Benchmark(f"rms_norm {tag}{suffix}", lambda x, w, tuned=tuned: layernorm.rms_norm(x, w, 1e-6,
                                                                                                 tuned=tuned),
                           lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6), make_inputs=rows_of(dtype, params=1)),
                 sizes),
            ]
    out.update(fused_group(dev, gpu))
    return out


def fused_group(dev: str, gpu: bool) -> dict:
    """y = gelu(x + bias) + residual in one Triton kernel against torch's three (x + bias, gelu, + residual)."""
    shapes = [(4096, 4096), (8192, 8192), (16384, 8192)] if gpu else [(4, 512), (3, 1000)]
    benchmarks = []
    for tag, dtype in DTYPES.items():
        def make(shape, dtype=dtype):
            x = torch.randn(shape, device=dev).to(dtype)
            return x, torch.randn(shape[1], device=dev).to(dtype), torch.randn(shape, device=dev).to(dtype)

        # Bytes are the fused kernel's (x, bias, residual read once, y written once) for both, so GB/s compare the
        # same work; torch's chain moves 7 MN + N elements to the kernel's 3 MN + N (fused.fusion_speedup).
        # In bf16 torch rounds x + bias and gelu to bf16 on the way: an ulp or two at |y| ~ 10, hence atol.
        benchmarks.append((Benchmark(f"bias+gelu+residual {tag}", fused.bias_gelu_residual,
                                     fused.bias_gelu_residual_unfused, make_inputs=make,
                                     atol=3e-2 if dtype == torch.bfloat16 else None), shapes))
    return {"fused": benchmarks}


def large(size: str) -> bool:
    """Whether a size label is one the targets are about: rows of >= 4096 columns, vectors of >= 2**26."""
    if "x" in size:
        return int(size.split("x")[1]) >= TARGET_MIN_COLS
    return size.startswith("2^") and int(size[2:]) >= TARGET_MIN_LOG2_N


def check_targets(rows) -> list[str]:
    """One line per row that has a target: the speed against torch, and whether it meets the target."""
    lines = []
    for r in rows:
        target = next((t for prefix, t in TARGETS.items() if r.name.startswith(prefix)), None)
        if target is None or r.speedup is None or not large(r.size):
            continue
        verdict = "met" if r.speedup >= target else "MISSED"
        lines.append(f"{r.name:24} {r.size:>10}  {r.speedup:.2f}x torch (target >= {target:.2f}x): {verdict}")
    return lines


def main(folder: Path) -> None:
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder: give an existing folder for the plots (default /tmp)")
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU every table says it in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    everything = []
    for group, pairs in groups(dev).items():
        rows = [row for benchmark, sizes in pairs for row in bench.measure(benchmark, sizes, copy_bandwidth=copy)]
        everything += rows
        print(f"\n== {group}\n{bench.table(rows)}", flush=True)
        print(f"plot: {bench.plot(rows, folder / f'triton_{group}.png')}")
    if dev == "cuda":
        print("\n== targets (issue 5)\n" + "\n".join(check_targets(everything)))
        print("\n== tuned long-row norms against the readable (issue 24: >= 1.0x torch at 1024 x 65536)\n"
              + "\n".join(bench.tuned_against_readable(everything, "torch")))
    wrong = [f"{r.name} {r.size}" for r in everything if not r.correct]
    (folder / "triton_kernels.json").write_text(json.dumps(
        {"device": device.describe(), "rows": [dataclasses.asdict(r) for r in everything]}, indent=1))
    if wrong:
        raise SystemExit("wrong output (differs from torch): " + ", ".join(wrong))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp"))
