"""A chain of six elementwise ops run as separate torch ops, as torch.compile's kernel, and as the Triton kernel
aisys.graph.codegen generates for the fused group.

    PYTHONPATH=src python3 benchmarks/fusion.py              # on one GPU; writes book/04-autograd/fusion_<gpu>.json
    PYTHONPATH=src python3 benchmarks/fusion.py --cpu-check  # tiny sizes, Triton's interpreter, no timing

The chain, on x and residual of shape (M, N) and bias and scale of shape (N,):
    y = sigmoid(gelu(x + bias) * scale + residual) * x        (exact GELU: erf)
Its graph (aisys.graph.ir) gives the bytes each version moves (aisys.graph.fusion.bytes_moved): one group per op
for torch's eager ops (each writes its result and the next reads it back), one group for the fused kernel. Every
row's bandwidth is the FUSED byte count over its time (the useful traffic), as a fraction of a device-to-device
copy measured in the same run (aisys.bench), so the rows compare directly; the table after it gives the bytes of
each version. Timed with aisys.bench (CUDA events, L2 flushed between repetitions, inputs in rotation), in
float32 and bfloat16, each against torch's eager ops in the same run. The generated source is written to a module
file and imported (Triton's @jit reads a kernel's source with inspect), once per block size tried.
"""

import argparse
import dataclasses
import importlib.util
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from aisys import bench, device, tensors
from aisys.graph import codegen, fusion, ir

OPS = ["t", "u", "v", "w", "g", "y"]


def chain_graph(M, N, dtype):
    n = ir.node
    full, row = [M, N], [N]
    return {"nodes": [n("x", "input", shape=full, dtype=dtype), n("bias", "input", shape=row, dtype=dtype),
                      n("scale", "input", shape=row, dtype=dtype), n("residual", "input", shape=full, dtype=dtype),
                      n("t", "add", ["x", "bias"], full, dtype), n("u", "gelu", ["t"], full, dtype),
                      n("v", "mul", ["u", "scale"], full, dtype), n("w", "add", ["v", "residual"], full, dtype),
                      n("g", "sigmoid", ["w"], full, dtype), n("y", "mul", ["g", "x"], full, dtype)],
            "outputs": ["y"]}


def eager(x, bias, scale, residual):
    return torch.sigmoid(F.gelu(x + bias) * scale + residual) * x


def generated_runner(M, N, dtype, block, folder):
    """run(x, bias, scale, residual) -> y through the Triton kernel generated for the whole chain."""
    source = codegen.generate_triton(chain_graph(M, N, dtype), OPS, block=block)
    name = f"fused_{dtype}_{M}x{N}_{block}"
    path = Path(folder) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)

    def run(x, bias, scale, residual):
        with tensors.results_on_device():
            return module.run_fused(x, bias, scale, residual)[0]
    return run


def main(cpu_check: bool, out: Path | None):
    on_gpu = device.current() == "cuda" and not cpu_check
    if not on_gpu:
        device.use_triton_interpreter()
    dev = "cuda" if on_gpu else "cpu"
    shapes = [(8192, 8192), (16384, 8192)] if on_gpu else [(3, 1000)]
    folder = tempfile.mkdtemp(prefix="aisys_fusion_")
    rows, counts = [], []
    for dtype in ("fp32", "bf16"):
        torch_dtype = tensors.TORCH_DTYPES[dtype]

        def make(size, torch_dtype=torch_dtype):
            M, N = size
            return (torch.randn(M, N, device=dev, dtype=torch_dtype), torch.randn(N, device=dev, dtype=torch_dtype),
                    torch.randn(N, device=dev, dtype=torch_dtype), torch.randn(M, N, device=dev, dtype=torch_dtype))

        for shape in shapes:
            graph = chain_graph(*shape, dtype)
            fused = fusion.bytes_moved(graph, [OPS])
            unfused = fusion.bytes_moved(graph, [[op] for op in OPS])
            counts.append({"dtype": dtype, "shape": list(shape), "fused_bytes": fused, "unfused_bytes": unfused})
            # against eager in the same dtype (the speed baseline): bf16 eager rounds each of 5 intermediates to 8
            # bits (2^-9 relative each) where a fused kernel keeps them in fp32; fp32: erf's and exp's ulps
            rtol = 4e-2 if dtype == "bf16" else 1e-5

            def useful(size, f=fused):
                return f
            benchmarks = [bench.Benchmark(f"torch eager {dtype}", eager, None, make_inputs=make, bytes=useful)]
            if on_gpu:
                compiled = torch.compile(eager)
                benchmarks.append(bench.Benchmark(f"torch.compile {dtype}", compiled, eager, make_inputs=make,
                                                  bytes=useful, rtol=rtol, atol=rtol))
            for block in ((1024, 4096) if on_gpu else (256,)):
                benchmarks.append(bench.Benchmark(
                    f"generated triton BLOCK={block} {dtype}", generated_runner(*shape, dtype, block, folder),
                    eager, make_inputs=make, bytes=useful, rtol=rtol, atol=rtol))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", bench.NotAGPUWarning)
                rows += bench.measure(benchmarks, [shape])
    print(bench.table(rows))
    print()
    print(f"{'dtype':>5} {'shape':>11} {'unfused MB':>10} {'fused MB':>9} {'ratio':>6}")
    for c in counts:
        print(f"{c['dtype']:>5} {bench.size_label(tuple(c['shape'])):>11} {c['unfused_bytes'] / 1e6:10.1f} "
              f"{c['fused_bytes'] / 1e6:9.1f} {c['unfused_bytes'] / c['fused_bytes']:6.2f}")
    bad = [r.name for r in rows if not r.correct]
    if bad:
        raise SystemExit(f"wrong results: {bad}")
    if not on_gpu:
        print("no GPU measured: every version ran once at a tiny size, for correctness only")
        if out is None:  # nothing measured to store next to the page
            return
    path = out or Path(__file__).resolve().parents[1] / "book" / "04-autograd" / \
        f"fusion_{bench.gpu_label(torch.cuda.get_device_name())}.json"
    path.write_text(json.dumps({"device": device.describe(), "torch": torch.__version__,
                                "graph": "y = sigmoid(gelu(x + bias) * scale + residual) * x", "bytes": counts,
                                "rows": [dataclasses.asdict(r) for r in rows]}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-check", action="store_true", help="tiny sizes in Triton's interpreter, no timing")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON (default: next to the page)")
    args = parser.parse_args()
    main(args.cpu_check, args.out)
