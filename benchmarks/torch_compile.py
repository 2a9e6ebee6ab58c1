"""torch.compile against eager PyTorch on one small model, forward and forward+backward, on one GPU.

    PYTHONPATH=src python3 benchmarks/torch_compile.py  # GPU: writes book/04-autograd/torch_compile_<gpu>.json
    PYTHONPATH=src python3 benchmarks/torch_compile.py --cpu-check  # CPU: tiny sizes, once each, correctness only

The model is the page's (book/04-autograd/torch-compile.md): a transformer's MLP block,
y = LayerNorm(x + W2 GELU(W1 x + b1) + b2), with x of (tokens, d) and a hidden width h = 4d. Eager runs it as
separate ATen kernels (two GEMMs, a GELU, an add, a LayerNorm); torch.compile (TorchDynamo -> AOTAutograd ->
TorchInductor) keeps the GEMMs as library calls or Triton templates and fuses what lies between them.

Each configuration (dtype, compile mode, pass) gets its own torch.compile of a fresh copy of the model, after
torch._dynamo.reset() and with Inductor's caches off, so its compile time is its own: the wall-clock of the first
call minus an eager call (a throw-away compile first takes the process's one-time costs: imports, compile
workers). The passes:
- "forward": the model under torch.no_grad() (an inference graph; nothing saved for backward);
- "forward+backward": torch.autograd.grad of the output against a fixed upstream gradient, with respect to the
  input and every parameter (the training step without the optimiser).
Timed with aisys.bench (CUDA events, L2 flushed before each repetition, the eager baseline alternating with the
compiled function on the same inputs in the same run). FLOPs are the two GEMMs' 2 * tokens * d * h each (times 3
for forward+backward), compared with the dtype's dense peak in aisys.hardware (fp32 without TF32: the CUDA-core
peak; bf16: the Tensor Core peak). Modes: torch.compile's default and, where the time budget allows,
"max-autotune-no-cudagraphs" (Inductor benchmarks GEMM templates and kernel configs at compile time; no CUDA graphs,
so the timing harness's events and flushes stay valid).

The JSON holds every row, the compile seconds, the FX graph Dynamo captured (its text), and the first Triton kernels
Inductor generated for the compiled forward (torch._inductor.utils.run_and_get_code), truncated. Runs offline: no
downloads, weights random.
"""

import argparse
import copy
import dataclasses
import json
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from aisys import bench, device
from aisys.bench import Benchmark

GPU_SIZE = (8192, 1024)  # (tokens, d): h = 4096, the MLP of a GPT-2-medium-sized layer over 8192 tokens
CPU_SIZE = (16, 32)
MODES = ("default", "max-autotune-no-cudagraphs")
BUDGET_SECONDS = 180  # compile-and-time budget; the max-autotune rows are skipped once it is spent
KERNELS_KEPT = 3  # generated kernels whose source the JSON stores (every kernel's name is stored)
KERNEL_LINES = 60  # lines kept of each


class MLPBlock(nn.Module):
    """A transformer's MLP block with a residual and a post-LayerNorm: LayerNorm(x + fc2(GELU(fc1(x))))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):  # x: (tokens, d)
        return self.norm(x + self.fc2(F.gelu(self.fc1(x))))  # (tokens, d)


def gemm_flops(tokens: int, d: int) -> float:
    """FLOPs of the forward's two GEMMs: (tokens, d) x (d, 4d) and (tokens, 4d) x (4d, d)."""
    return 2 * (2.0 * tokens * d * 4 * d)


def forward(model):
    def run(x, grad):
        with torch.no_grad():
            return model(x)
    return run


def forward_backward(model):
    params = list(model.parameters())

    def run(x, grad):
        out = model(x)
        return (out, *torch.autograd.grad(out, [x, *params], grad))
    return run


PASSES = {"forward": (forward, 1), "forward+backward": (forward_backward, 3)}  # FLOPs: backward = 2 forwards


def make_inputs(dev: str, dtype: torch.dtype):
    def make(size):
        tokens, d = size
        x = torch.randn(tokens, d, device=dev, dtype=dtype, requires_grad=True)
        return x, torch.randn(tokens, d, device=dev, dtype=dtype)  # the input and the upstream gradient
    return make


def fx_graph_text(model, x) -> str:
    """The FX graph TorchDynamo captures from the model's forward, as text (a backend that only records it)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=record)(x)
    torch._dynamo.reset()
    return "\n\n".join(graphs)


def generated_kernels(source: str) -> list[dict]:
    """The kernels in Inductor's output code: Triton (@triton.jit, on a GPU) or C++ (on a CPU), each truncated."""
    found = re.findall(r"(\w+) = async_compile\.(triton|cpp_pybinding)\((.*?)'''\n(.*?)'''", source, flags=re.DOTALL)
    kernels = []
    for i, (name, kind, _, body) in enumerate(found):
        lines = body.strip("\n").splitlines()
        text = "\n".join(lines[:KERNEL_LINES])
        if len(lines) > KERNEL_LINES:
            text += f"\n# ... {len(lines) - KERNEL_LINES} more lines"
        kernels.append({"name": name, "language": "triton" if kind == "triton" else "c++", "lines": len(lines),
                        "source": text if i < KERNELS_KEPT else None})
    return kernels


def compile_config(model, dtype, mode, pass_name, dev, size) -> dict:
    """Compile one configuration; returns its compiled function, compile seconds and (forward) generated code."""
    from torch._inductor.utils import run_and_get_code

    make_pass, _ = PASSES[pass_name]
    torch._dynamo.reset()
    compiled_model = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
    compiled = make_pass(compiled_model)
    eager = make_pass(model)
    args = make_inputs(dev, dtype)(size)
    eager(*args)  # eager's own first-call costs (cuBLAS handles, allocator) stay out of the compile time
    _sync(dev)
    start = time.perf_counter()
    eager(*args)
    _sync(dev)
    eager_seconds = time.perf_counter() - start
    start = time.perf_counter()
    _, sources = run_and_get_code(compiled, *args)
    _sync(dev)
    first_call = time.perf_counter() - start
    return {"run": compiled, "eager": eager, "compile_seconds": max(first_call - eager_seconds, 0.0),
            "kernels": generated_kernels("\n".join(sources)), "code_lines": sum(s.count("\n") for s in sources)}


def _sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


# Tolerances of compiled against eager: Inductor fuses and reorders, and the gradients of the weights sum over every
# token. fp32: a few ulps per add over sums of thousands of terms; bf16 (8 bits of mantissa): half a percent per
# rounding, and the fused kernel keeps fp32 intermediates where eager rounds each op to bf16, so a few percent.
# atol is a fraction of each output's largest entry (normwise): a weight's gradient sums 8192 tokens' products, and
# summed in another order its small entries differ by roundings of its large partial sums, not of themselves (bf16
# backward, measured on an H100: elementwise differences of 1 to 2 where the largest entries are in the hundreds).
TOLERANCES = {torch.float32: (1e-3, 1e-5), torch.bfloat16: (5e-2, 2e-2)}


def run(dev: str, dtypes, modes, budget: float) -> dict:
    size = GPU_SIZE if dev == "cuda" else CPU_SIZE
    tokens, d = size
    torch.manual_seed(0)
    base = MLPBlock(d, 4 * d).to(dev)
    torch._inductor.config.force_disable_caches = True  # every compile time is a cold compile
    warnings.filterwarnings("ignore", message=".*force_disable_caches")  # says the line above again, per compile
    torch.compile(lambda t: torch.sin(t) + 1)(torch.ones(4, device=dev))  # the process's one-time costs (imports,
    torch._dynamo.reset()  # compile workers) go here, not into the first configuration's compile time
    started = time.perf_counter()
    rows, compiles, kernels, code_lines, skipped = [], [], [], None, []
    fx = fx_graph_text(copy.deepcopy(base), make_inputs(dev, torch.float32)(size)[0])
    copy_bandwidth = bench.measure_copy_bandwidth() if dev == "cuda" else None
    for mode in modes:
        for dtype in dtypes:
            for pass_name, (_, flop_factor) in PASSES.items():
                label = f"{pass_name} {_short(dtype)} {mode}"
                if mode != "default" and time.perf_counter() - started > budget:
                    skipped.append(label)
                    print(f"skipped (over the {budget:.0f} s budget): {label}", flush=True)
                    continue
                model = copy.deepcopy(base).to(dtype)
                config = compile_config(model, dtype, mode, pass_name, dev, size)
                compiles.append({"config": label, "seconds": config["compile_seconds"]})
                if pass_name == "forward" and mode == "default" and dtype == dtypes[0]:
                    kernels, code_lines = config["kernels"], config["code_lines"]
                rtol, atol = TOLERANCES[dtype]
                benchmark = Benchmark(label, config["run"], config["eager"], make_inputs=make_inputs(dev, dtype),
                                      flops=lambda s, f=flop_factor: f * gemm_flops(*s), compute=_short(dtype),
                                      rtol=rtol, atol=atol, atol_of_largest=True)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # the CPU table says so in its first line
                    row = bench.measure([benchmark], [size], copy_bandwidth=copy_bandwidth)[0]
                rows.append({**dataclasses.asdict(row), "compile_seconds": config["compile_seconds"],
                             "dtype": _short(dtype), "mode": mode, "pass": pass_name})
                print(f"{label}: compiled in {config['compile_seconds']:.1f} s", flush=True)
    return {"device": device.describe(), "device_name": rows[0]["device_name"], "torch": torch.__version__,
            "triton": _triton_version(), "size": {"tokens": tokens, "d": d, "hidden": 4 * d},
            "model": "LayerNorm(x + fc2(GELU(fc1(x)))), fc1: d -> 4d, fc2: 4d -> d", "rows": rows,
            "compiles": compiles, "skipped": skipped, "fx_graph": fx, "kernels": kernels,
            "output_code_lines": code_lines, "total_seconds": time.perf_counter() - started}


def _short(dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]


def _triton_version():
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def table(result) -> str:
    rows = result["rows"]
    on_gpu = rows[0]["device"] == "cuda"
    head = ["pass", "dtype", "mode", "eager ms", "compiled ms", "speed-up", "compile s", "TFLOP/s", "% peak FLOP/s",
            "ok"]
    body = []
    for r in rows:
        rate = r["flops"] / r["seconds"] if r["flops"] else None
        body.append([r["pass"], r["dtype"], r["mode"], f"{r['baseline_seconds'] * 1e3:.4f}",
                     f"{r['seconds'] * 1e3:.4f}",
                     f"{r['baseline_seconds'] / r['seconds']:.2f}x", f"{r['compile_seconds']:.1f}",
                     f"{rate / 1e12:.1f}" if on_gpu and rate else "-",
                     f"{100 * rate / r['peak_flops']:.1f}" if on_gpu and rate and r["peak_flops"] else "-",
                     "yes" if r["correct"] else "NO"])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    lines = ["  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
             for line in [head, ["-" * w for w in widths], *body]]
    size = result["size"]
    notes = [f"{result['device_name']}, torch {result['torch']}; tokens {size['tokens']}, d {size['d']}, "
             f"hidden {size['hidden']}; {result['model']}."]
    if on_gpu:
        r = rows[0]
        notes.append(f"Median of {r['reps']} repetitions (CUDA events, L2 flushed before each, eager and compiled "
                     "alternating); speed-up = eager ms / compiled ms; FLOP/s counts the two GEMMs (x3 with backward) "
                     f"against the dtype's dense peak; copy bandwidth measured in this run "
                     f"{r['copy_bandwidth'] / 1e9:,.0f} GB/s.")
    else:
        notes.append(bench.NO_GPU.replace("the Triton interpreter", "eager and compiled CPU code")
                     + "; each ran once, for correctness against eager.")
    return "\n".join(notes + [""] + lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-check", action="store_true",
                        help="tiny sizes on the CPU, fp32, default mode, each configuration once: a smoke test")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON's path (default: book/04-autograd/torch_compile_<gpu>.json on a GPU, "
                             "/tmp/torch_compile_cpu.json with --cpu-check)")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS,
                        help="seconds after which the max-autotune configurations are skipped")
    args = parser.parse_args(argv)
    if args.cpu_check:
        dev, dtypes, modes = "cpu", (torch.float32,), ("default",)
    else:
        dev = device.current()
        if dev != "cuda":
            parser.error("no CUDA GPU here: run with --cpu-check for the CPU smoke test")
        dtypes, modes = (torch.bfloat16, torch.float32), MODES
    print(device.describe() if not args.cpu_check else "CPU smoke check", flush=True)
    result = run(dev, dtypes, modes, args.budget)
    result["table"] = table(result)
    print(result["table"])
    for kernel in result["kernels"][:1]:
        print(f"\n== first generated kernel of the compiled forward ({kernel['language']}, {kernel['lines']} lines)\n"
              + kernel["source"])
    if args.out is not None:
        path = args.out
    elif args.cpu_check:
        path = Path("/tmp/torch_compile_cpu.json")
    else:
        path = Path(__file__).parents[1] / "book" / "04-autograd" / \
            f"torch_compile_{bench.gpu_label(result['device_name'])}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path} ({statistics.fmean(c['seconds'] for c in result['compiles']):.1f} s per compile on "
          f"average, {result['total_seconds']:.0f} s in all)")
    wrong = [r["config"] if "config" in r else r["name"] for r in result["rows"] if not r["correct"]]
    if wrong:
        raise SystemExit("compiled output differs from eager: " + ", ".join(wrong))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
