"""The W4A16 GEMV (aisys.triton_kernels.int4_gemv) against the fp16 GEMV (torch's F.linear) on a GPU, at batch 1.

    PYTHONPATH=src python3 benchmarks/quant_w4a16.py --out book/08-quantization/w4a16_gemv_<gpu>.json  # h100, h200

Measured with aisys.bench (CUDA events, L2 flushed before each repetition, two input sets in rotation, F.linear
timed by the same code in the same run), against the copy bandwidth measured at the start. Shapes (N outputs,
K inputs) of Llama-7B's MLP, 11008 x 4096 (gate and up) and 4096 x 11008 (down), and 8192 x 8192 (a 70B model's
attention projection), random INT4 weights in groups of 128 along K (sequential words), x of one token in float16.
The fp16 baseline multiplies by the same weights dequantized to float16, so both give the same y up to rounding.

Bytes are the W4A16 kernel's minimum traffic: the packed words (N K / 2), the fp16 scales and the uint8 zero points
(N K / 128 each), x and y. Prints the table, the fraction of the copy bandwidth (target >= 0.7) and the speed-up over
F.linear (target >= 2.5), and writes every row with the targets and versions to --out (the book reads
book/08-quantization/w4a16_gemv_<gpu>.json). On a CPU it runs the kernel once at tiny sizes in the Triton
interpreter, for correctness only: no GPU is measured, the output says so, and nothing is written unless --out is
given.
"""

import argparse
import dataclasses
import json
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels import int4_gemv  # on a CPU: Triton's interpreter

GPU_SHAPES = [(1, 11008, 4096), (1, 4096, 11008), (1, 8192, 8192)]  # (M, N, K)
CPU_SHAPES = [(1, 40, 256), (3, 24, 128)]
GROUP_SIZE = 128
TARGETS = {"fraction_of_copy": 0.7, "speedup": 2.5}
ATOL = 5e-3  # y ~ 1 in fp16 (ulp 2**-10): the fp16 weights round (q - z) s, and both round y


def w4a16_bytes(size) -> float:
    """The bytes the W4A16 GEMV moves at least: packed words, scales (fp16), zeros (uint8), x and y (fp16)."""
    m, n, k = size
    return n * k / 2 + n * (k // GROUP_SIZE) * (2 + 1) + (m * k + m * n) * 2


def benchmark(dev: str) -> Benchmark:
    dtype = torch.float16 if dev == "cuda" else torch.float32  # the interpreter computes fp16 slowly, not better

    def make(size):
        m, n, k = size
        packed, scales, zeros, w = int4_gemv.random_weights(n, k, GROUP_SIZE, device=dev)
        return torch.randn(m, k, device=dev).to(dtype), packed, scales, zeros, w.to(dtype)

    return Benchmark("w4a16 gemv g128", lambda x, packed, s, z, w: int4_gemv.w4a16_gemv(x, packed, s, z),
                     lambda x, packed, s, z, w: F.linear(x, w), make_inputs=make, bytes=w4a16_bytes,
                     flops=lambda size: 2 * size[0] * size[1] * size[2], compute="fp16", atol=ATOL)


def verdicts(rows) -> list[str]:
    """One line per row: the fraction of the copy bandwidth and the speed-up over F.linear, against the targets."""
    lines = []
    for r in rows:
        copy, speedup = r.fraction_of_copy, r.speedup
        if copy is None or speedup is None:
            continue
        ok = copy >= TARGETS["fraction_of_copy"] and speedup >= TARGETS["speedup"]
        lines.append(f"{r.size:>14}: {copy:.2f} of the copy bandwidth (target >= {TARGETS['fraction_of_copy']}), "
                     f"{speedup:.2f}x F.linear fp16 (target >= {TARGETS['speedup']}): {'met' if ok else 'MISSED'}")
    return lines


def best_configs() -> dict:
    """The autotuner's choice per key (N, K, group size, order, fp16 path, dtypes): what the GPU ran."""
    cache = getattr(int4_gemv.w4a16_gemv_kernel, "cache", {})
    return {str(key): str(config) for key, config in cache.items()}


def main(out: Path | None) -> None:
    if out is not None and not out.parent.is_dir():
        raise SystemExit(f"{out.parent} is not a folder: give a path in an existing folder for the rows")
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU the table says it in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    rows = bench.measure(benchmark(dev), GPU_SHAPES if dev == "cuda" else CPU_SHAPES, copy_bandwidth=copy)
    print(bench.table(rows), flush=True)
    saved = {"device": device.describe(), "group_size": GROUP_SIZE, "targets": TARGETS,
             "rows": [dataclasses.asdict(r) for r in rows]}
    if dev == "cuda":
        import triton

        print("\n== targets (issue 20)\n" + "\n".join(verdicts(rows)))
        saved["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda}
        saved["configs"] = best_configs()
        print("\n== autotuned\n" + json.dumps(saved["configs"], indent=1))
    if out is not None:
        out.write_text(json.dumps(saved, indent=1))
        print(f"rows: {out}")
    wrong = [r.size for r in rows if not r.correct]
    if wrong:
        raise SystemExit("wrong output (differs from F.linear on the dequantized weights): " + ", ".join(wrong))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the rows (book/08-quantization/w4a16_gemv_<gpu>.json, e.g. h100)")
    main(parser.parse_args().out)
