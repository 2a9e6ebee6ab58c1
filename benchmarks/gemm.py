"""The reference Triton GEMM against cuBLAS (torch.matmul) on a GPU, and GEMM/GEMV points for the roofline.

    PYTHONPATH=src python3 benchmarks/gemm.py [FOLDER]     # FOLDER for the plot and rows; default /tmp

Measured with aisys.bench (CUDA events, L2 flushed before each repetition, inputs in rotation, cuBLAS
timed by the same code in the same run):

- square GEMMs M = N = K from 256 to 8192, BF16 and FP16, FP32 accumulation: TFLOP/s, the fraction of
  the device's dense Tensor Core peak, and the speed against torch.matmul;
- skinny GEMMs M = K = 8192 with N = 1 (a GEMV) to 4096, BF16: how the arithmetic intensity
  2MNK / (2(MK + KN + MN)) grows with N, and the point where the GEMM stops being memory-bound
  (the decode-versus-prefill story of chapter 7); N = 1 through torch.mv as well.

It also samples the SM clock and the board power with nvidia-smi while cuBLAS runs 8192^3 BF16 GEMMs
back to back for a few seconds: the datasheet's Tensor Core peak assumes the 1.83 GHz boost clock, and a
GPU at its power limit runs slower.

Prints the tables, the issue's target (Triton >= 0.85x cuBLAS at 8192^3 BF16) met or missed, and saves
FOLDER/gemm.json (every row, with the device and the measured copy bandwidth; the book's GEMM pages read
it) and FOLDER/gemm.png. On a CPU it runs each kernel once at small sizes, in the Triton interpreter, for
correctness only: no GPU is measured, and the output says so.
"""

import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels import matmul  # on a CPU: Triton's interpreter

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TARGET = ("triton gemm bf16", "8192x8192x8192", 0.85)  # kernel, size, least speed against cuBLAS


def gemm_flops(size):
    M, N, K = size
    return 2.0 * M * N * K


def groups(dev: str) -> dict[str, list[tuple[Benchmark, list]]]:
    """(benchmark, sizes) pairs per group, at GPU sizes on a GPU and small ones in the interpreter."""
    gpu = dev == "cuda"
    squares = [(s, s, s) for s in ((256, 512, 1024, 2048, 4096, 8192) if gpu else (64, 96))]
    skinny = [(8192, n, 8192) for n in (1, 8, 32, 128, 512, 4096)] if gpu else [(64, 1, 64), (64, 8, 96)]

    def make(dtype):
        def inputs(size):
            M, N, K = size
            return torch.randn(M, K, device=dev).to(dtype), torch.randn(K, N, device=dev).to(dtype)
        return inputs

    out = {"square": [], "skinny": []}
    for tag, dtype in DTYPES.items():
        out["square"].append((Benchmark(f"triton gemm {tag}", matmul.matmul, torch.matmul, make_inputs=make(dtype),
                                        flops=gemm_flops, compute=tag), squares))
    out["skinny"] = [
        (Benchmark("triton gemm bf16", matmul.matmul, torch.matmul, make_inputs=make(torch.bfloat16),
                   flops=gemm_flops, compute="bf16"), skinny),
        (Benchmark("torch.mv bf16", lambda a, x: torch.mv(a, x), None, compute="bf16", flops=gemm_flops,
                   make_inputs=lambda size: (torch.randn(size[0], size[2], device=dev).to(torch.bfloat16),
                                             torch.randn(size[2], device=dev).to(torch.bfloat16))),
         skinny[:1]),
    ]
    return out


def sustained_clock(seconds: float = 5.0) -> dict | None:
    """Median SM clock (MHz) and board power (W) sampled by nvidia-smi under back-to-back 8192^3 BF16 GEMMs."""
    if shutil.which("nvidia-smi") is None:
        return None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):  # warm up to a steady state before sampling
        torch.matmul(a, a)
    torch.cuda.synchronize()
    sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                "-lms", "100"], stdout=subprocess.PIPE, text=True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            torch.matmul(a, a)
        torch.cuda.synchronize()
    sampler.terminate()
    samples = [line.split(",") for line in sampler.communicate()[0].splitlines() if line.count(",") == 1]
    if not samples:
        return None
    return {"sm_clock_mhz": statistics.median(float(mhz) for mhz, _ in samples),
            "power_w": statistics.median(float(w) for _, w in samples), "samples": len(samples)}


def check_target(rows) -> str:
    name, size, target = TARGET
    row = next((r for r in rows if r.name == name and r.size == size), None)
    if row is None or row.speedup is None:
        return f"{name} {size}: not measured"
    verdict = "met" if row.speedup >= target else "MISSED"
    return f"{name} {size}: {row.speedup:.2f}x cuBLAS (target >= {target:.2f}x): {verdict}"


def main(folder: Path) -> None:
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder: give an existing folder for the plot (default /tmp)")
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU every table says it in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    by_group = {}
    for group, pairs in groups(dev).items():
        rows = [row for benchmark, sizes in pairs for row in bench.measure(benchmark, sizes, copy_bandwidth=copy)]
        by_group[group] = rows
        print(f"\n== {group}\n{bench.table(rows)}", flush=True)
    everything = [row for rows in by_group.values() for row in rows]
    print(f"plot: {bench.plot(by_group['square'], folder / 'gemm.png')}")
    configs, clock = {}, None
    if dev == "cuda":
        print("\n== target (issue 6)\n" + check_target(everything))
        configs = {" ".join(map(str, key)): str(config) for key, config in matmul.matmul_kernel.cache.items()}
        print("\n== autotuned configuration per (M, N, K, dtypes)\n"
              + "\n".join(f"{k}: {v}" for k, v in configs.items()))
        clock = sustained_clock()
        print(f"\n== under back-to-back 8192^3 BF16 cuBLAS GEMMs (nvidia-smi)\n{clock}")
    wrong = [f"{r.name} {r.size}" for r in everything if not r.correct]
    (folder / "gemm.json").write_text(json.dumps(
        {"device": device.describe(), "copy_bandwidth": copy, "sustained": clock, "configs": configs,
         "rows": [dataclasses.asdict(r) for r in everything]}, indent=1))
    if wrong:
        raise SystemExit("wrong output (differs from cuBLAS): " + ", ".join(wrong))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp"))
