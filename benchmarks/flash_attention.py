"""The Triton FlashAttention forward against torch's scaled_dot_product_attention on a GPU, as a fraction of peak.

    PYTHONPATH=src python3 benchmarks/flash_attention.py [--json PATH]
    # PATH for the rows; default /tmp/flash_attention.json

Measured with aisys.bench (CUDA events, L2 flushed before each repetition, inputs in rotation, SDPA timed
by the same code in the same run), BF16, q, k, v of shape (B, nh, T, hs) with B * T = 16384 tokens and
nh * hs = 2048 (Llama-style heads: nh = 16 of 128, or nh = 32 of 64), for T = 1024 ... 16384, so that
every size launches 2048 programs of 128 queries (15 per SM on an H100's 132), causal and not.

FLOPs are 4 B nh T^2 hs (half when causal), as FlashAttention's papers count them (the exps left out), and
the table gives them as a fraction of the device's dense BF16 Tensor Core peak (aisys.hardware: 989.4
TFLOP/s on an H100 SXM); bytes are the minimum (q, k, v read once, O written once). Prints the table, the
issue's target (FlashAttention >= 0.6x SDPA at T = 4096, hs = 128, BF16, causal and not) met or missed, and
writes every row to PATH (the book reads book/07-inference/flash_attention_h100.json), with the versions
measured, the CUDA kernels SDPA launched for each shape at T = 4096 (which of its backends ran) and the config
the autotuner chose for each tuned row. Rows named "... readable" time the readable kernel
(`flash_attention(..., tuned=False)`) at every length; rows named "... tuned" the default, the tensor-descriptor
kernel (tutorial 06's Hopper autotuning space), at T = 4096, and a table sets the two side by side, both against
SDPA in this run. On a CPU it runs each kernel once at tiny sizes in the Triton interpreter (float32), for
correctness only: no GPU is measured, and the output says so.
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

TOKENS = 16384  # B * T
WIDTH = 2048  # nh * hs
LENGTHS = [1024, 2048, 4096, 8192, 16384]
HEAD_SIZES = [64, 128]
TUNED_LENGTHS = [4096]  # the tuned kernel autotunes 10 to 12 configs per shape: timed where the targets are
TARGET = (4096, 128, 0.6)  # T, hs, least speed against SDPA


def sizes(dev: str, head_size: int) -> list[tuple[int, int, int, int]]:
    """(B, nh, T, hs) at GPU sizes on a GPU, tiny ones in the interpreter."""
    if dev != "cuda":
        return [(1, 2, 40, head_size), (2, 1, 17, head_size)]
    return [(TOKENS // t, WIDTH // head_size, t, head_size) for t in LENGTHS]


def benchmark(dev: str, head_size: int, causal: bool, tuned: bool) -> Benchmark:
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32  # the interpreter's bf16 products are unreliable

    def make(size):
        batch, heads, t, hs = size
        return tuple(torch.randn(batch, heads, t, hs, device=dev).to(dtype) for _ in range(3))

    def cost(size):
        return flash_attention_cost(*size, dtype="bf16" if dev == "cuda" else "fp32", causal=causal)

    return Benchmark(f"flash hs{head_size} {'causal' if causal else 'full'} {'tuned' if tuned else 'readable'}",
                     lambda q, k, v: fa.flash_attention(q, k, v, causal=causal, tuned=tuned),
                     lambda q, k, v: fa.sdpa(q, k, v, causal=causal),
                     make_inputs=make, bytes=lambda s: cost(s).bytes, flops=lambda s: cost(s).flops, compute="bf16",
                     atol=2e-2 if dev == "cuda" else None)


def check_target(rows) -> list[str]:
    """One line per row the issue's target is about: T = 4096, hs = 128."""
    t, head_size, target = TARGET
    lines = []
    for r in rows:
        if r.speedup is not None and r.size.endswith(f"x{t}x{head_size}"):
            verdict = "met" if r.speedup >= target else "MISSED"
            lines.append(f"{r.name:22} {r.size:>16}  {r.speedup:.2f}x SDPA (target >= {target:.2f}x): {verdict}")
    return lines


def tuned_configs() -> dict[str, str]:
    """The config the autotuner chose for each shape the tuned kernel ran at, by "Tq x Tk hs causal|full"."""
    chosen = {}
    for key, config in fa.flash_attention_tma_kernel.cache.items():
        t_q, t_k, head_size, causal = key[:4]  # the autotuner's key: T_Q, T_K, HEAD_DIM, CAUSAL, PRECISION, ...
        chosen[f"{t_q}x{t_k} hs{head_size} {'causal' if causal else 'full'}"] = (
            f"BLOCK_M {config.kwargs['BLOCK_M']}, BLOCK_N {config.kwargs['BLOCK_N']}, {config.num_stages} stages, "
            f"{config.num_warps} warps")
    return chosen


def sdpa_kernels(head_size: int, causal: bool) -> list[str]:
    """The CUDA kernels one SDPA call launches at T = 4096 (their names tell cuDNN, FlashAttention-2 and
    memory-efficient attention apart), from torch's profiler."""
    from torch.profiler import ProfilerActivity, profile

    size = sizes("cuda", head_size)[LENGTHS.index(4096)]
    q, k, v = benchmark("cuda", head_size, causal, tuned=False).make_inputs(size)
    fa.sdpa(q, k, v, causal=causal)  # warm: the profile holds one call's kernels only
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        fa.sdpa(q, k, v, causal=causal)
        torch.cuda.synchronize()
    return sorted({event.key for event in trace.key_averages() if event.device_type == torch.autograd.DeviceType.CUDA})


def main(path: Path) -> None:
    if not path.parent.is_dir():
        raise SystemExit(f"{path.parent} is not a folder: give a path in an existing folder for the rows")
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU the table says it in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    rows = []
    for head_size in HEAD_SIZES:
        for causal in (False, True):
            rows += bench.measure(benchmark(dev, head_size, causal, tuned=False), sizes(dev, head_size),
                                  copy_bandwidth=copy)
            tuned_sizes = [s for s in sizes(dev, head_size) if dev != "cuda" or s[2] in TUNED_LENGTHS]
            rows += bench.measure(benchmark(dev, head_size, causal, tuned=True), tuned_sizes, copy_bandwidth=copy)
    print(bench.table(rows), flush=True)
    if dev == "cuda":
        print("\n== target (issue 8)\n" + "\n".join(check_target(rows)))
        print("\n== tuned against readable (issue 24: hs 128 >= 0.85x SDPA, hs 64 >= 0.95x)\n"
              + "\n".join(bench.tuned_against_readable(rows, "SDPA")))
    saved = {"device": device.describe(), "rows": [dataclasses.asdict(r) for r in rows]}
    if dev == "cuda":
        import triton

        saved["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                             "cudnn": torch.backends.cudnn.version()}
        saved["sdpa_kernels"] = {f"hs{hs} {'causal' if causal else 'full'}": sdpa_kernels(hs, causal)
                                 for hs in HEAD_SIZES for causal in (False, True)}
        print("\n== SDPA's kernels at T = 4096\n" + json.dumps(saved["sdpa_kernels"], indent=1))
        saved["tuned_configs"] = tuned_configs()
        print("\n== the tuned kernel's configs, as the autotuner chose them\n" + json.dumps(saved["tuned_configs"],
                                                                                            indent=1))
    path.write_text(json.dumps(saved, indent=1))
    print(f"rows: {path}")
    wrong = [f"{r.name} {r.size}" for r in rows if not r.correct]
    if wrong:
        raise SystemExit("wrong output (differs from SDPA): " + ", ".join(wrong))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("/tmp/flash_attention.json"), help="where to write the rows")
    main(parser.parse_args().json)
