"""The Triton INT8 GEMM against torch._int_mm (cuBLASLt), with BF16 cuBLAS and FP8 torch._scaled_mm in the same run.

    PYTHONPATH=src python3 benchmarks/quant_int8.py [--out PATH]
    # PATH for the rows; default /tmp/int8_gemm.json (the book reads book/08-quantization/int8_gemm_h100.json)

Measured with aisys.bench (CUDA events, L2 flushed before each repetition, inputs in rotation, the baseline timed
by the same code in the same run), C = A B with A (M, K) row-major and B (K, N) the transpose of a row-major (N, K)
weight, the layout of a linear layer and the one 8-bit wgmma and cuBLASLt want (K-major on both sides), at
M = N = K = 4096 and 8192:

- "triton int8 gemm": aisys.triton_kernels.int8_gemm, int32 output, against torch._int_mm (int8 x int8 -> int32);
- "triton int8 w8a8 fused": the same kernel dequantizing in its epilogue (float32(acc) * per-token scale *
  per-channel scale, float32 output), against torch._int_mm followed by the scaling in torch (two kernels and
  the int32 matrix through memory);
- "cublas bf16": torch.matmul on bfloat16 (FP32 accumulation);
- "torch._scaled_mm fp8 e4m3": FP8 e4m3 inputs, per-tensor float32 scales, bfloat16 output (torch 2.x signature
  _scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False), b
  column-major), with use_fast_accum False (the accurate accumulation) and True.

Each row's FLOP/s is 2 M N K over the median time, as a fraction of the device's dense Tensor Core peak for its
input type (aisys.hardware: on an H100 SXM 1978.9 TOPS INT8 and FP8, 989.4 TFLOP/s BF16). Prints the tables,
a summary, the issue's target (Triton INT8 >= 0.8x torch._int_mm at 4096^3) met or missed, and writes every row
with the device, the versions and the autotuned configs to PATH. On a CPU it runs each kernel once at a small size
(Triton in its interpreter), for correctness only: no GPU is measured, and the output says so.
"""

import argparse
import dataclasses
import json
import warnings
from pathlib import Path

import torch
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels import int8_gemm  # on a CPU: Triton's interpreter (set before triton is imported)

TARGET = ("triton int8 gemm", "4096x4096x4096", 0.8)  # kernel, size, least speed against torch._int_mm


def gemm_flops(size):
    M, N, K = size
    return 2.0 * M * N * K


def _int8_inputs(dev):
    def make(size):
        M, N, K = size
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device=dev)
        w = torch.randint(-128, 128, (N, K), dtype=torch.int8, device=dev)
        return a, w.t()  # (K, N), K-major
    return make


def _w8a8_inputs(dev):
    def make(size):
        a, b = _int8_inputs(dev)(size)
        M, N = a.shape[0], b.shape[1]
        a_scale = torch.rand(M, device=dev, dtype=torch.float32) * 1e-3 + 1e-4  # per token
        b_scale = torch.rand(N, device=dev, dtype=torch.float32) * 1e-3 + 1e-4  # per output channel
        return a, b, a_scale, b_scale
    return make


def _bf16_inputs(dev):
    def make(size):
        M, N, K = size
        return (torch.randn(M, K, device=dev, dtype=torch.bfloat16),
                torch.randn(N, K, device=dev, dtype=torch.bfloat16).t())
    return make


def _fp8_inputs(dev):
    def make(size):
        M, N, K = size
        a = torch.randn(M, K, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(N, K, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm requires
        one = torch.tensor(1.0, device=dev, dtype=torch.float32)
        return a, b, one, one.clone()
    return make


def scaled_mm(a, b, scale_a, scale_b, fast_accum=False):
    """torch._scaled_mm with a bfloat16 output; older torch returned (out, amax)."""
    out = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
    return out[0] if isinstance(out, tuple) else out


def int_mm(a, b):
    return torch._int_mm(a, b)


def int_mm_then_scale(a, b, a_scale, b_scale):
    return torch._int_mm(a, b).float() * a_scale[:, None] * b_scale[None, :]


def fused_w8a8(a, b, a_scale, b_scale):
    return int8_gemm.int8_gemm(a, b, output="float32", a_scale=a_scale, b_scale=b_scale)


def benchmarks(dev: str) -> list[Benchmark]:
    rows = [
        Benchmark("triton int8 gemm", int8_gemm.int8_gemm, int_mm, make_inputs=_int8_inputs(dev), flops=gemm_flops,
                  compute="int8"),
        # float32 outputs: the kernel's float32 products may be fused (FMA) where torch rounds each: 1e-5 relative
        Benchmark("triton int8 w8a8 fused", fused_w8a8, int_mm_then_scale, make_inputs=_w8a8_inputs(dev),
                  flops=gemm_flops, compute="int8", rtol=1e-5, atol=1e-6),
        Benchmark("cublas bf16", torch.matmul, None, make_inputs=_bf16_inputs(dev), flops=gemm_flops, compute="bf16"),
    ]
    if dev == "cuda":  # FP8 GEMMs need a GPU of compute capability 8.9 or more
        rows += [Benchmark("torch._scaled_mm fp8 e4m3", scaled_mm, None, make_inputs=_fp8_inputs(dev),
                           flops=gemm_flops, compute="fp8_e4m3"),
                 Benchmark("torch._scaled_mm fp8 e4m3 fast accum", lambda *args: scaled_mm(*args, fast_accum=True),
                           None, make_inputs=_fp8_inputs(dev), flops=gemm_flops, compute="fp8_e4m3")]
    return rows


def check_target(rows) -> str:
    name, size, target = TARGET
    row = next((r for r in rows if r.name == name and r.size == size), None)
    if row is None or row.speedup is None or row.device != "cuda":
        return f"{name} {size}: not measured"
    verdict = "met" if row.speedup >= target else "MISSED"
    return f"{name} {size}: {row.speedup:.2f}x torch._int_mm (target >= {target:.2f}x): {verdict}"


def summary(rows) -> str:
    """Rate, fraction of the input type's dense peak, and of the BF16 peak, per kernel and size."""
    lines = [f"{'kernel':40s} {'size':16s} {'T(FL)OP/s':>10s} {'% own peak':>10s} {'% BF16 peak':>11s}"]
    for r in rows:
        if r.flop_rate is None or r.device != "cuda":
            continue
        own = "-" if r.peak_flops is None else f"{100 * r.flop_rate / r.peak_flops:.1f}"
        bf16 = device_peak(r, "bf16")
        vs_bf16 = "-" if bf16 is None else f"{100 * r.flop_rate / bf16:.1f}"
        lines.append(f"{r.name:40s} {r.size:16s} {r.flop_rate / 1e12:10.1f} {own:>10s} {vs_bf16:>11s}")
    return "\n".join(lines)


def device_peak(row, dtype: str):
    from aisys.hardware import chip

    if row.chip is None:
        return None
    return chip(row.chip).peak_flops.get(dtype)


def main(path: Path) -> None:
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU the table says it in its first line
    sizes = [(4096, 4096, 4096), (8192, 8192, 8192)] if dev == "cuda" else [(64, 48, 96)]
    rows = bench.measure(benchmarks(dev), sizes)
    print(bench.table(rows), flush=True)
    configs = {}
    if dev == "cuda":
        print("\n== summary\n" + summary(rows))
        print("\n== target (issue 20)\n" + check_target(rows))
        configs = {" ".join(map(str, key)): str(config) for key, config in int8_gemm.int8_gemm_kernel.cache.items()}
        print("\n== autotuned configuration per (M, N, K, OUTPUT, dtypes)\n"
              + "\n".join(f"{k}: {v}" for k, v in configs.items()))
    saved = {"device": device.describe(), "torch": torch.__version__, "triton": int8_gemm.triton.__version__,
             "target": check_target(rows), "configs": configs, "rows": [dataclasses.asdict(r) for r in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1))
    print(f"wrote {path}")
    wrong = [f"{r.name} {r.size}" for r in rows if not r.correct]
    if wrong:
        raise SystemExit("wrong output (differs from the baseline): " + ", ".join(wrong))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/int8_gemm.json"), help="where to write the rows")
    main(parser.parse_args().out)
