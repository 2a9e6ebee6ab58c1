"""The Triton paged-attention decode kernel against SDPA over a contiguous cache, as a fraction of the bandwidth.

    PYTHONPATH=src python3 benchmarks/paged_attention.py [--quick] [--json PATH]

One decode step of one layer with Llama-3-8B's attention shapes (nh 32, nkv 8, hs 128), a bf16 cache in
blocks of 16 tokens from a pool handed out in random order (a realistic scattered pool), for batches of
1, 16 and 64 sequences at contexts of 512 to 16384 tokens (the largest: 4.3 GB of K and V per input set).
Measured with aisys.bench (CUDA events, L2 flushed, two input sets), against the copy bandwidth measured
at the start and the datasheet's HBM peak. Rows, by name:

- "paged decode": the kernel as it chooses by default (its `PARTITION_RULE` and its `COMBINE`);
- "paged decode, auto" and "paged decode, grid": the two partition rules (`auto_partition_size`: partitions
  of 512 tokens only when one program per sequence and kv head would leave SMs idle; `grid_partition_size`:
  at least one program per SM, partitions of 128 to 512 tokens), their partitions combined by a second kernel;
  "paged decode, auto, fused" and "paged decode, grid, fused": the same, combined inside the one launch by
  the last program of each sequence and kv head. At every shape: the rule x combine A/B, in one run;
- "paged decode, split 512" and "paged decode, no split": both choices forced, at batches 1 and 64, to
  show what the split buys and what it costs;
- "paged decode, split 64 / 128 / 256" (and ", fused"): finer splits forced at batch 1, the shapes the grid
  rule changes, to see which partition each combine wants;
- baseline, in the same run on the same values: torch's scaled_dot_product_attention on a contiguous
  (B, nkv, context, hs) cache with enable_gqa=True, so it reads the same bytes as the kernel (K and V
  once per kv head, not expanded to nh heads) — the best a contiguous layout gets, with no block table.

--quick measures only the rule x combine A/B at batches 1 and 16 (contexts 1024, 4096, 16384) and at batch 64,
context 4096 (where "auto" does not split; must not regress), for a run of a minute or two; its rows lack those
the book reads, so write its --json elsewhere than the book's file.

Bytes are what decode must move: every cached key and value of every sequence once, q read and the output
written once. A ragged row draws context lengths uniformly from 1 to twice the nominal context; its baseline
pads the contiguous cache to the longest and masks the rest (a contiguous layout must pad), while its bytes
count only the real tokens, so its "vs baseline" shows what padding costs.

Prints the table, the A/B against SDPA per shape (goal: B=1 ctx=4096 >= 0.95x SDPA) and the issue's target
(paged decode at B=64, context 4096 >= 0.6 of the measured copy bandwidth), and with --json writes the rows
(book/07-inference/paged_decode_h100.json is what the book reads). On a CPU it runs each kernel once at tiny
sizes in the Triton interpreter, for correctness only.
"""

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from aisys import bench, device
from aisys.bench import Benchmark
from aisys.triton_kernels.paged_attention import (  # on a CPU: Triton's interpreter
    COMBINE,
    COMBINES,
    PARTITION_RULE,
    paged_attention_decode,
)

N_HEADS, N_KV_HEADS, HEAD_SIZE = 32, 8, 128  # Llama-3-8B
BLOCK_SIZE = 16
DTYPE = torch.bfloat16
TARGET = 0.6  # of the measured copy bandwidth, at the headline shape
HEADLINE = "B=64 ctx=4096"
RULES = ("auto", "grid")  # the partition rules the A/B compares, each with both COMBINES
FINER = (64, 128, 256)  # splits forced at batch 1, with both combines


@dataclasses.dataclass(frozen=True)
class Shape:
    batch: int
    context: int
    ragged: bool = False

    def __str__(self):
        return f"B={self.batch} ctx={self.context}" + (" ragged" if self.ragged else "")

    def context_lens(self) -> list[int]:
        """Every sequence at `context`, or (ragged) drawn from 1 .. 2 x context, the same for every call."""
        if not self.ragged:
            return [self.context] * self.batch
        return np.random.default_rng(self.batch).integers(1, 2 * self.context, self.batch).tolist()


def shapes(gpu: bool, quick: bool = False) -> list[Shape]:
    if not gpu:  # contexts past 64 tokens, so that the forced and grid splits split and both combines run
        return [Shape(1, 100), Shape(3, 40, ragged=True)]
    if quick:
        return [Shape(b, c) for b in (1, 16) for c in (1024, 4096, 16384)] + [Shape(64, 4096)]
    grid = [Shape(b, c) for b in (1, 16, 64) for c in (512, 1024, 4096, 16384)]
    return grid + [Shape(64, 4096, ragged=True)]


def make_inputs(shape: Shape, dev: str):
    """Paged cache and block tables, the same keys and values laid out contiguously for SDPA, and q."""
    lens = shape.context_lens()
    per_seq = [-(-n // BLOCK_SIZE) for n in lens]
    num_blocks = sum(per_seq)
    k_cache, v_cache = (torch.randn(num_blocks, BLOCK_SIZE, N_KV_HEADS, HEAD_SIZE, device=dev, dtype=DTYPE)
                        for _ in range(2))
    pool = torch.randperm(num_blocks, device=dev, dtype=torch.int32)  # blocks handed out in random order
    tables = torch.zeros(shape.batch, max(per_seq), dtype=torch.int32, device=dev)
    start = 0
    for b, n in enumerate(per_seq):
        tables[b, :n] = pool[start:start + n]
        start += n
    q = torch.randn(shape.batch, N_HEADS, HEAD_SIZE, device=dev, dtype=DTYPE)
    # The contiguous copy: token t of sequence b at [b, :, t], padded to the longest context with zeros.
    longest = max(lens)
    slots = torch.arange(longest, device=dev)
    rows = tables[:, (slots // BLOCK_SIZE).clamp(max=tables.shape[1] - 1)].long()
    k, v = (c[rows, slots % BLOCK_SIZE].permute(0, 2, 1, 3).contiguous() for c in (k_cache, v_cache))
    mask = (slots[None, :] < torch.tensor(lens, device=dev)[:, None])[:, None, None, :] if shape.ragged else None
    context_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return q, k_cache, v_cache, tables, context_lens, longest, k, v, mask


def paged(**options):
    """The kernel with the given options (partition_size, combine); the kernel's own defaults for the others."""
    def run(q, k_cache, v_cache, tables, context_lens, longest, *contiguous):
        return paged_attention_decode(q, k_cache, v_cache, tables, context_lens, max_context_len=longest, **options)
    return run


def variant(partition, combine: str) -> str:
    """A row's name: 'paged decode, grid' or 'paged decode, split 64, fused' ('kernel' combines are unnamed)."""
    label = partition if isinstance(partition, str) else "no split" if partition is None else f"split {partition}"
    return f"paged decode, {label}" + (", fused" if combine == "fused" else "")


def sdpa_contiguous(q, k_cache, v_cache, tables, context_lens, longest, k, v, mask):
    """SDPA of the one new query per sequence over its contiguous (B, nkv, context, hs) keys and values."""
    return F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=mask, enable_gqa=True)[:, :, 0]


def decode_bytes(shape: Shape) -> float:
    """K and V of every real token once, plus q read and the output written."""
    element = torch.finfo(DTYPE).bits // 8
    kv = 2 * sum(shape.context_lens()) * N_KV_HEADS * HEAD_SIZE * element
    return kv + 2 * shape.batch * N_HEADS * HEAD_SIZE * element


def plan(dev: str, quick: bool = False) -> list[tuple[Benchmark, list[Shape]]]:
    """Each benchmark with the shapes it runs at."""
    # atol: the kernel and SDPA round p and the output to bf16 at different points. On a GPU the outputs are
    # averages over thousands of tokens (|out| ~ 0.02) and the two agree to a few 1e-4, where a wrong kernel is
    # off by the whole output; the CPU's contexts of a few tokens give outputs of v's size (~2: a bf16 step 0.016).
    atol = 1e-3 if dev == "cuda" else 3e-2
    common = dict(make_inputs=lambda shape: make_inputs(shape, dev), bytes=decode_bytes, compute="bf16", atol=atol)

    def bench(name, run):
        return Benchmark(name, run, sdpa_contiguous, **common)

    gpu = dev == "cuda"
    sizes = shapes(gpu, quick)
    ab = [(bench(variant(rule, combine), paged(partition_size=rule, combine=combine)), sizes)
          for rule in RULES for combine in COMBINES]
    if quick or not gpu:  # on a CPU (slow) the A/B's rows already run split, unsplit and both combines
        return ab
    batches_1_64 = [s for s in sizes if s.batch in (1, 64)]
    batch_1 = [s for s in sizes if s.batch == 1]
    return [(bench("paged decode", paged()), sizes), *ab,
            *((bench(variant(n, "kernel"), paged(partition_size=n, combine="kernel")), batches_1_64)
              for n in (512, None)),
            *((bench(variant(n, combine), paged(partition_size=n, combine=combine)), batch_1)
              for n in FINER for combine in COMBINES)]


def compare_variants(rows) -> list[str]:
    """Per shape: each rule x combine's speed against SDPA measured beside it (SDPA's time / the kernel's), and the
    fastest of them."""
    by = {(r.name, r.size): r for r in rows}
    lines = []
    for size in dict.fromkeys(r.size for r in rows):
        found = {(rule, combine): by.get((variant(rule, combine), size)) for rule in RULES for combine in COMBINES}
        if any(r is None or r.speedup is None for r in found.values()):
            continue
        cells = "  ".join(f"{rule} {combine} {r.speedup:.2f}x" for (rule, combine), r in found.items())
        (rule, combine), best = min(found.items(), key=lambda item: item[1].seconds)
        today = found["auto", "kernel"]
        lines.append(f"{size:24} {cells}  | fastest: {rule}, {combine} ({today.seconds / best.seconds:.2f}x the "
                     f"speed of auto, kernel)")
    return lines


def check_target(rows) -> str:
    row = next((r for r in rows if r.name == "paged decode" and r.size == HEADLINE), None)
    if row is None or row.fraction_of_copy is None:
        return "target: not measured (no GPU, or --quick)"
    verdict = "met" if row.fraction_of_copy >= TARGET else "MISSED"
    return (f"target: paged decode at {HEADLINE} reaches {row.fraction_of_copy:.2f} of the measured copy bandwidth "
            f"(>= {TARGET}): {verdict}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="only the partition rule x combine A/B at B=1 and 16 (contexts 1024, 4096, 16384) and "
                             "B=64 ctx 4096; its rows lack those the book reads")
    parser.add_argument("--json", type=Path, help="write the rows here (the book reads "
                                                  "book/07-inference/paged_decode_h100.json, from a full run)")
    args = parser.parse_args(argv)
    if args.json is not None and not args.json.parent.is_dir():
        raise SystemExit(f"--json {args.json}: its folder does not exist")
    dev = device.current()
    print(device.describe())
    warnings.simplefilter("ignore", bench.NotAGPUWarning)  # on a CPU the table says so in its first line
    copy = bench.measure_copy_bandwidth() if dev == "cuda" else None
    rows = []
    for benchmark, sizes in plan(dev, args.quick):
        rows += bench.measure([benchmark], sizes, copy_bandwidth=copy)
    print(bench.table(rows))
    if dev == "cuda":
        print(f"\n== partition rule x combine, speed against SDPA (its time / the kernel's; goal: B=1 ctx=4096 "
              f">= 0.95x); default: partition_size='{PARTITION_RULE}', combine='{COMBINE}'")
        print("\n".join(compare_variants(rows)))
    print(check_target(rows))
    if args.json is not None:
        args.json.write_text(json.dumps({"device": device.describe(), "target": TARGET, "headline": HEADLINE,
                                         "quick": args.quick, "rows": [dataclasses.asdict(r) for r in rows]},
                                        indent=1))
        print(f"rows written to {args.json}")
    wrong = [f"{r.name} {r.size}" for r in rows if not r.correct]
    if wrong:
        raise SystemExit("wrong output (differs from SDPA): " + ", ".join(wrong))


if __name__ == "__main__":
    main(sys.argv[1:])
