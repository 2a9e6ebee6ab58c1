"""The Triton FlashAttention backward against torch's SDPA backward on a GPU, as a fraction of peak.

    PYTHONPATH=src python3 benchmarks/flash_attention_backward.py [--json PATH]
    # on one GPU; writes book/07-inference/flash_attention_backward_<gpu>.json unless PATH is given

The sizes of benchmarks/flash_attention.py (BF16, (B, nh, T, hs) with B * T = 16384 tokens and nh * hs = 2048,
T = 1024 ... 16384, hs 64 and 128, causal and not). Ours is `flash_attention_backward(q, k, v, o, lse, dO)` (the
delta, dK/dV and dQ kernels, autotuned); the baseline is the backward of torch's
scaled_dot_product_attention with its FlashAttention backend (`torch.autograd.grad` of an SDPA output whose graph
is built once per input set and kept, so only the backward runs in the timed region), measured by the same code in
the same run (aisys.bench: CUDA events, L2 flushed, inputs in rotation). Gradients are compared with SDPA's within
3% of each gradient's largest entry (both are bf16 with float32 accumulation; their orders of summation differ).

FLOPs are 2.5 x the forward's (FlashAttention-2's count: 5 matmuls of T^2 hs against the forward's 2, half when
causal), so ours and SDPA's are credited the same work even though ours recomputes q k^T and dO v^T in its dQ pass;
given as a fraction of the device's dense BF16 Tensor Core peak. Bytes are the minimum: q, k, v, O, dO read once,
dQ, dK, dV written once. On a CPU (no GPU, or AISYS_DEVICE=cpu) it runs each kernel once at tiny sizes in the
Triton interpreter (float32) against SDPA's backward, for correctness only: nothing is measured, the output says
so, and the JSON goes to /tmp unless PATH is given.
"""

import argparse
import dataclasses
import json
import warnings
from pathlib import Path

import torch
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.inference.flash_attention import flash_attention_cost
from aisys.triton_kernels import flash_attention as fa  # on a CPU: Triton's interpreter
from aisys.triton_kernels.flash_attention_backward import flash_attention_backward

TOKENS, WIDTH = 16384, 2048  # B * T and nh * hs, as benchmarks/flash_attention.py
LENGTHS = [1024, 2048, 4096, 8192, 16384]
HEAD_SIZES = [64, 128]
BACKWARD_FLOPS = 2.5  # x the forward's: 5 matmuls against 2 (Dao 2023, section 3.1.2)
PAGE = Path(__file__).resolve().parents[1] / "book" / "07-inference"


def sizes(dev: str, head_size: int) -> list[tuple[int, int, int, int]]:
    """(B, nh, T, hs) at GPU sizes on a GPU, tiny ones in the interpreter."""
    if dev != "cuda":
        return [(2, 2, 20, head_size)]  # two query blocks of 16, the second ragged
    return [(TOKENS // t, WIDTH // head_size, t, head_size) for t in LENGTHS]


def _sdpa_graph(q, k, v, causal):
    """SDPA's output and its (q, k, v) leaves, the graph kept for autograd.grad (FlashAttention backend on a GPU)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in (q, k, v))
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = fa.sdpa(*leaves, causal=causal)
    else:
        out = fa.sdpa(*leaves, causal=causal)
    return out, leaves


def benchmark(dev: str, head_size: int, causal: bool) -> Benchmark:
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32  # the interpreter's bf16 products are unreliable

    def make(size):
        batch, heads, t, hs = size
        q, k, v, d_out = (torch.randn(batch, heads, t, hs, device=dev).to(dtype) for _ in range(4))
        out, lse = fa.flash_attention(q, k, v, causal=causal, return_lse=True)
        return q, k, v, out, lse, d_out, _sdpa_graph(q, k, v, causal)

    def ours(q, k, v, out, lse, d_out, graph):
        return flash_attention_backward(q, k, v, out, lse, d_out, causal=causal)

    def sdpa_backward(q, k, v, out, lse, d_out, graph):
        return torch.autograd.grad(graph[0], graph[1], d_out, retain_graph=True)

    def cost(size):
        return flash_attention_cost(*size, dtype="bf16" if dev == "cuda" else "fp32", causal=causal)

    def moved(size):
        return cost(size).bytes * 2  # forward's q, k, v, O -> q, k, v, O, dO read and dQ, dK, dV written

    return Benchmark(f"flash bwd hs{head_size} {'causal' if causal else 'full'}", ours, sdpa_backward,
                     make_inputs=make, bytes=moved, flops=lambda s: BACKWARD_FLOPS * cost(s).flops, compute="bf16",
                     atol=3e-2 if dev == "cuda" else 1e-4, rtol=0.0 if dev == "cuda" else 1e-4,
                     atol_of_largest=dev == "cuda")


def main(path: Path | None) -> None:
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU the table says it in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    rows = []
    for head_size in HEAD_SIZES:
        for causal in (False, True):
            rows += bench.measure(benchmark(dev, head_size, causal), sizes(dev, head_size), copy_bandwidth=copy)
    print(bench.table(rows), flush=True)
    saved = {"device": device.describe(), "rows": [dataclasses.asdict(r) for r in rows]}
    if dev == "cuda":
        import triton

        saved["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda}
        if path is None:
            path = PAGE / f"flash_attention_backward_{bench.gpu_label(torch.cuda.get_device_name())}.json"
    elif path is None:
        path = Path("/tmp/flash_attention_backward.json")
    if not path.parent.is_dir():
        raise SystemExit(f"{path.parent} is not a folder: give a path in an existing folder for the rows")
    path.write_text(json.dumps(saved, indent=1))
    print(f"rows: {path}")
    wrong = [f"{r.name} {r.size}" for r in rows if not r.correct]
    if wrong:
        raise SystemExit("wrong gradients (differ from SDPA's): " + ", ".join(wrong))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the rows (default: next to the page on a GPU, /tmp on a CPU)")
    main(parser.parse_args().json)
