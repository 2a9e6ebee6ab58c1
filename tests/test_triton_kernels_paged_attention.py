"""The Triton paged-attention decode kernel against the numpy reference: ragged contexts, scattered blocks, GQA,
split and unsplit, partitions combined by a second kernel or by the last program (fused) and the fused combine's
counters; its bad inputs; the planning helpers; the benchmark script on a CPU; a GPU check for the lead."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aisys.inference.paged_attention import paged_attention
from aisys.triton_kernels import paged_attention as module
from aisys.triton_kernels.paged_attention import (
    PARTITION_SIZE,
    GRID_MIN_PARTITION,
    auto_partition_size,
    grid_partition_size,
    num_partitions,
    paged_attention_decode,
    program_tokens,
    sm_busy_fraction,
)

ROOT = Path(__file__).resolve().parents[1]
GARBAGE = 10**6  # block table entries past a context's blocks: the kernel must never read them


def paged_case(context_lens, *, block_size=16, n_heads=4, n_kv_heads=2, head_size=16, seed=0, spare_blocks=3):
    """Numpy q, caches, block tables (blocks handed out in a random order, garbage past each context) and lens."""
    rng = np.random.default_rng(seed)
    per_seq = [-(-n // block_size) for n in context_lens]
    num_blocks = sum(per_seq) + spare_blocks
    k, v = (rng.standard_normal((num_blocks, block_size, n_kv_heads, head_size)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((len(context_lens), n_heads, head_size)).astype(np.float32)
    pool = rng.permutation(num_blocks)
    tables = np.full((len(context_lens), max(per_seq, default=0) + 1), GARBAGE, np.int32)
    start = 0
    for b, n in enumerate(per_seq):
        tables[b, :n] = pool[start:start + n]
        start += n
    return q, k, v, tables, np.asarray(context_lens, np.int32)


def run_kernel(device, q, k, v, tables, lens, dtype=torch.float32, **kwargs):
    q, k, v, tables, lens = (torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (q, k, v, tables, lens))
    return paged_attention_decode(q.to(dtype), k.to(dtype), v.to(dtype), tables, lens, **kwargs)


def assert_matches_reference(device, case, dtype=torch.float32, scale=None, **kwargs):
    out = run_kernel(device, *case, dtype=dtype, scale=scale, **kwargs)
    q, k, v, tables, lens = case
    assert out.shape == q.shape and out.dtype == dtype
    if dtype == torch.float32:
        expected = paged_attention(q, k, v, tables, lens, scale=scale)
        np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-5, atol=1e-6)
    else:  # the reference on the same rounded values; the kernel rounds p and the output to the dtype
        rounded = [torch.from_numpy(x).to(dtype).float().numpy() for x in (q, k, v)]
        expected = paged_attention(*rounded, tables, lens, scale=scale)
        np.testing.assert_allclose(out.float().cpu().numpy(), expected, rtol=2e-2, atol=2e-2)


# Contexts of 1 token, exactly a block, a block + 1, and ragged mixes; partitions of one tile (16), of several
# tiles (32), and no split; GQA groups of 1, 2 and 4; both ways of combining the partitions.
@pytest.mark.parametrize("combine", ["kernel", "fused"])
@pytest.mark.parametrize("partition_size", [16, 32, None])
@pytest.mark.parametrize("context_lens", [[1], [16], [17], [1, 16, 17, 50]])
def test_matches_the_reference_on_ragged_contexts(context_lens, partition_size, combine, torch_device):
    case = paged_case(context_lens, seed=len(context_lens))
    assert_matches_reference(torch_device, case, partition_size=partition_size, combine=combine)


@pytest.mark.parametrize("combine", ["kernel", "fused"])
@pytest.mark.parametrize("n_heads, n_kv_heads", [(4, 4), (4, 2), (8, 2)])
def test_gqa_groups_share_one_kv_head(n_heads, n_kv_heads, combine, torch_device):
    case = paged_case([5, 40], n_heads=n_heads, n_kv_heads=n_kv_heads, seed=n_heads + n_kv_heads)
    assert_matches_reference(torch_device, case, partition_size=16, combine=combine)


# The fused combine: the last program of each (sequence, kv head) combines its group's partials. Ragged batches whose
# short sequences leave partitions idle and take the one-partition path (1, 5, 17 tokens), contexts combined in
# several steps (300 tokens in partitions of 16: 19 partials, steps of 8 at group 4 and hs 128, of 4 at group 8),
# GQA groups of 1, 4, 8 and 3 (padded to 4), head sizes 64, 128 and 24, float32 and bfloat16, partitions of 16, 32
# and the grid rule's 64.
@pytest.mark.parametrize("context_lens, n_heads, n_kv_heads, head_size, dtype, partition_size", [
    ([1, 16, 17, 50], 4, 4, 64, torch.float32, 16),
    ([300, 17, 5], 8, 2, 128, torch.bfloat16, 16),
    ([70, 5, 129], 8, 1, 64, torch.float32, "grid"),
    ([33, 150, 2], 8, 1, 128, torch.bfloat16, 32),
    ([40, 9], 6, 2, 24, torch.float32, 16),
])
def test_fused_combine_matches_the_reference(context_lens, n_heads, n_kv_heads, head_size, dtype, partition_size,
                                             torch_device):
    case = paged_case(context_lens, n_heads=n_heads, n_kv_heads=n_kv_heads, head_size=head_size,
                      seed=n_heads + head_size)
    assert_matches_reference(torch_device, case, dtype=dtype, partition_size=partition_size, combine="fused")


def fused_counts(device) -> torch.Tensor:
    """The fused combine's counters for the current stream of `device` (what the last call left there)."""
    (counts,) = [c for (dev, _), c in module._COUNTS.items() if dev.type == torch.device(device).type]
    return counts


def test_fused_counts_return_to_zero_and_repeated_calls_agree(torch_device):
    case = paged_case([120, 17, 5], n_heads=4, n_kv_heads=2, seed=4)  # 8, 2 and 1 partitions of 16
    first = run_kernel(torch_device, *case, partition_size=16, combine="fused")
    assert not fused_counts(torch_device).any()
    for _ in range(2):
        again = run_kernel(torch_device, *case, partition_size=16, combine="fused")
        torch.testing.assert_close(again, first, rtol=0, atol=0)
        assert not fused_counts(torch_device).any()
    np.testing.assert_allclose(first.cpu().numpy(), paged_attention(*case), rtol=1e-5, atol=1e-6)


def test_fused_calls_of_other_shapes_grow_the_counters(torch_device):
    module._COUNTS.clear()
    small, large = paged_case([40], n_heads=2, n_kv_heads=1, seed=1), paged_case([40, 3, 70, 20, 33], seed=2)
    for case in (small, large, small):  # 1 counter, then 5 x 2 (more than the buffer holds), then 1 again
        assert_matches_reference(torch_device, case, partition_size=16, combine="fused")
    assert fused_counts(torch_device).numel() >= 10 and not fused_counts(torch_device).any()


def test_fused_call_after_a_launch_that_stopped_part_way(torch_device):
    """A launch that raises after some programs counted must not leave counts for the next call: that call would
    find no last program for some (sequence, kv head), and its output there would be uninitialised memory."""
    if torch_device != "cpu":
        pytest.skip("a launch that faults part-way is an illegal memory access on a GPU, which ends the process")
    q, k, v, tables, lens = case = paged_case([70, 40], seed=6)
    assert_matches_reference(torch_device, case, partition_size=16, combine="fused")
    counts = fused_counts(torch_device)  # the buffer the next call will use
    broken = tables.copy()
    broken[0, 3] = GARBAGE  # tokens 48..63 of sequence 0: its partition 3 reads outside the cache
    with pytest.raises(IndexError):  # aisys's bounds-checked interpreter stops the launch there
        run_kernel(torch_device, q, k, v, broken, lens, partition_size=16, combine="fused", max_context_len=70)
    assert counts.any()  # partitions 0..2 of sequence 0 had counted
    assert_matches_reference(torch_device, case, partition_size=16, combine="fused")
    # a max_context_len below a context is the caller's error (unchecked when given): its result is wrong, but the
    # next call's is not
    run_kernel(torch_device, *case, partition_size=16, combine="fused", max_context_len=30)
    assert_matches_reference(torch_device, case, partition_size=16, combine="fused")
    # and a call refused before its launch changes nothing
    with pytest.raises(ValueError, match="partition_size"):
        run_kernel(torch_device, *case, partition_size=24, combine="fused")
    assert_matches_reference(torch_device, case, partition_size=16, combine="fused")


@pytest.mark.parametrize("block_size", [1, 4, 32])
def test_block_sizes_smaller_and_larger_than_a_tile(block_size, torch_device):
    # The interpreter's tile is 16 tokens: blocks of 1 and 4 put several blocks in one tile, 32 half a block.
    case = paged_case([3, 33, 70], block_size=block_size, seed=block_size)
    assert_matches_reference(torch_device, case, partition_size=32)


def test_head_size_not_a_power_of_two_and_a_scale(torch_device):
    case = paged_case([9, 21], head_size=24, n_heads=2, n_kv_heads=1)
    assert_matches_reference(torch_device, case, scale=0.3, partition_size=16)


def test_default_partition_splits_long_contexts(torch_device):
    assert num_partitions(PARTITION_SIZE + 1) == 2
    case = paged_case([PARTITION_SIZE + 1, 3], block_size=32, n_heads=2, n_kv_heads=1, head_size=16)
    assert_matches_reference(torch_device, case)


def test_auto_splits_only_when_the_unsplit_grid_leaves_sms_idle():
    assert auto_partition_size(batch=64, n_kv_heads=8, sms=132) is None  # 512 programs: about 4 per SM
    assert auto_partition_size(batch=16, n_kv_heads=8, sms=132) == PARTITION_SIZE  # 128 programs: some SMs idle
    assert auto_partition_size(batch=1, n_kv_heads=8, sms=132) == PARTITION_SIZE


def test_grid_splits_a_small_batch_until_every_sm_has_a_program():
    assert grid_partition_size(batch=64, n_kv_heads=8, sms=132, max_context_len=4096) is None  # 512 programs
    assert grid_partition_size(batch=1, n_kv_heads=8, sms=132, max_context_len=4096) == 128  # 8 x 32 = 256
    assert grid_partition_size(batch=1, n_kv_heads=8, sms=132, max_context_len=16384) == 512  # 8 x 32 = 256
    assert grid_partition_size(batch=16, n_kv_heads=8, sms=132, max_context_len=4096) == 512  # 128 x 8 = 1024
    assert grid_partition_size(batch=16, n_kv_heads=8, sms=132, max_context_len=512) == 256  # 128 x 2 = 256
    assert grid_partition_size(batch=1, n_kv_heads=8, sms=132, max_context_len=1024) == GRID_MIN_PARTITION  # 64
    assert grid_partition_size(batch=1, n_kv_heads=8, sms=132, max_context_len=100) == GRID_MIN_PARTITION
    assert grid_partition_size(batch=1, n_kv_heads=8, sms=64, max_context_len=4096) == 512  # fewer SMs: 8 x 8
    with pytest.raises(ValueError, match="max_context_len"):
        grid_partition_size(batch=1, n_kv_heads=8, sms=132, max_context_len=0)


def test_grid_partitions_match_the_reference(torch_device):
    case = paged_case([70, 5, 129], n_heads=4, n_kv_heads=2, seed=7)
    assert_matches_reference(torch_device, case, partition_size="grid")  # 128-token partitions: 2 for 129


def test_combining_more_partitions_than_one_step_loads(torch_device):
    # 300 tokens in partitions of 16: 19 partials per head, two steps of the combining kernel's 16.
    case = paged_case([300, 17], block_size=16, n_heads=2, n_kv_heads=1, seed=11)
    assert_matches_reference(torch_device, case, partition_size=16)


def test_large_scores_do_not_overflow(torch_device):
    q, k, v, tables, lens = paged_case([40, 7])
    assert_matches_reference(torch_device, (q * 100, k, v, tables, lens), partition_size=16)  # scores in the thousands


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_caches(dtype, torch_device):
    assert_matches_reference(torch_device, paged_case([20, 33], seed=5), dtype=dtype, partition_size=16)


def test_max_context_len_given_skips_reading_the_tables_and_gives_the_same_result(torch_device):
    case = paged_case([30, 3], seed=2)
    expected = run_kernel(torch_device, *case, partition_size=16)
    bounded = run_kernel(torch_device, *case, partition_size=16, max_context_len=30)
    torch.testing.assert_close(bounded, expected, rtol=0, atol=0)
    # a larger bound than needed only launches more partitions, which find no tokens and do nothing
    loose = run_kernel(torch_device, *case, partition_size=16, max_context_len=40)
    torch.testing.assert_close(loose, expected, rtol=0, atol=0)


def every_other_column(device, x):
    """x as a view whose last dimension has stride 2: the kernel must follow strides, not assume contiguity."""
    wide = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], device=device)
    wide[..., ::2] = torch.from_numpy(x)
    return wide[..., ::2]


def test_strided_inputs(torch_device):
    q, k, v, tables, lens = paged_case([12, 33], seed=3)
    strided = [every_other_column(torch_device, x) for x in (q, k, v)]
    out = paged_attention_decode(*strided, torch.from_numpy(tables).to(torch_device),
                                 torch.from_numpy(lens).to(torch_device),
                                 partition_size=16)
    np.testing.assert_allclose(out.cpu().numpy(), paged_attention(q, k, v, tables, lens), rtol=1e-5, atol=1e-6)


def test_empty_batch(torch_device):
    q = torch.zeros(0, 4, 16, device=torch_device)
    cache = torch.zeros(2, 16, 2, 16, device=torch_device)
    no_tables = torch.zeros(0, 1, dtype=torch.int32, device=torch_device)
    no_lens = torch.zeros(0, dtype=torch.int32, device=torch_device)
    out = paged_attention_decode(q, cache, cache, no_tables, no_lens)
    assert out.shape == (0, 4, 16)


def _bad(device, **changes):
    """The arguments of a valid call with some replaced."""
    q, k, v, tables, lens = paged_case([5, 20])
    args = dict(q=torch.from_numpy(q), k_cache=torch.from_numpy(k), v_cache=torch.from_numpy(v),
                block_tables=torch.from_numpy(tables), context_lens=torch.from_numpy(lens))
    args.update(changes)
    return {name: x.to(device) if isinstance(x, torch.Tensor) and x.device.type == "cpu" else x
            for name, x in args.items()}


@pytest.mark.parametrize("changes, kwargs, message", [
    (dict(q=np.zeros((2, 4, 16), np.float32)), {}, "q must be a torch.Tensor"),
    (dict(q=torch.zeros(2, 4, 16, dtype=torch.float64)), {}, "q must have dtype float32"),
    (dict(k_cache=torch.zeros(5, 16, 2, 16, dtype=torch.float16)), {}, "k_cache must have q's dtype"),
    (dict(block_tables=torch.zeros(2, 3, dtype=torch.int64)), {}, "block_tables must have dtype int32"),
    (dict(context_lens=torch.tensor([5.0, 20.0])), {}, "context_lens must have dtype int32"),
    (dict(q=torch.zeros(2, 16)), {}, "q must have shape (B, nh, hs)"),
    (dict(v_cache=torch.zeros(4, 16, 2, 16)), {}, "k_cache and v_cache must both have shape"),
    (dict(q=torch.zeros(2, 3, 16)), {}, "nh a multiple of nkv"),
    (dict(q=torch.zeros(2, 4, 8)), {}, "same head size"),
    (dict(block_tables=torch.zeros(3, 3, dtype=torch.int32)), {},
     "block_tables must have shape (2, max_blocks)"),
    (dict(context_lens=torch.tensor([5], dtype=torch.int32)), {}, "context_lens must have shape (2,)"),
    (dict(context_lens=torch.tensor([0, 20], dtype=torch.int32)), {}, "context_lens[0] must be >= 1"),
    (dict(context_lens=torch.tensor([5, 100], dtype=torch.int32)), {}, "context_lens[1] = 100 tokens needs 7 blocks"),
    (dict(block_tables=torch.full((2, 3), 99, dtype=torch.int32)), {}, "block_tables[0] points outside the cache"),
    ({}, dict(partition_size=24), "partition_size must be a power of two >= 16"),
    ({}, dict(partition_size=8), "partition_size must be a power of two >= 16"),
    ({}, dict(combine="both"), "combine must be one of ('kernel', 'fused')"),
    ({}, dict(scale=math.nan), "scale must be a finite number"),
    ({}, dict(max_context_len=0), "max_context_len must be"),
    ({}, dict(max_context_len=1000), "max_context_len = 1000 does not fit block_tables' 3 blocks of 16"),
    (dict(block_tables=torch.zeros(3, 3, dtype=torch.int32)), dict(max_context_len=20),
     "block_tables must have shape (2, max_blocks)"),
    (dict(context_lens=torch.tensor([5], dtype=torch.int32)), dict(max_context_len=20),
     "context_lens must have shape (2,)"),
    (dict(q=torch.zeros(2, 4, 8)), dict(max_context_len=20), "same head size"),
])
def test_bad_input_is_named(changes, kwargs, message, torch_device):
    with pytest.raises(ValueError) as error:
        paged_attention_decode(**_bad(torch_device, **changes), **kwargs)
    assert message in str(error.value)


def test_cuda_tensors_are_refused_by_the_interpreter(torch_device):
    if torch_device != "cpu":
        pytest.skip("only a CPU has tensors on the wrong device for Triton here")
    with pytest.raises(ValueError, match="q must be on cpu"):
        paged_attention_decode(**_bad(torch_device, q=torch.zeros(2, 4, 16, device="meta")))


def test_planning_helpers():
    assert num_partitions(4096) == 8 and num_partitions(4096, None) == 1 and num_partitions(1, 16) == 1
    # Llama-3-8B at B = 64, context 4096: 512 programs without split, 4096 with partitions of 512
    assert len(program_tokens([4096] * 64, 8, None)) == 512
    assert len(program_tokens([4096] * 64, 8)) == 4096
    assert program_tokens([40, 10], 1, 16) == [16, 16, 8, 10, 0, 0]
    assert program_tokens([40, 10], 2, None) == [40, 40, 10, 10]
    assert sm_busy_fraction([1] * 264, 132) == 1.0
    assert sm_busy_fraction([1] * 8, 132) == pytest.approx(8 / 132)
    assert sm_busy_fraction([1, 1, 1, 1, 4], 2) == pytest.approx(8 / 12)  # the long program last: one SM idles 4 of 6
    with pytest.raises(ValueError, match="n_kv_heads must be"):
        program_tokens([5], 0)
    with pytest.raises(ValueError, match="work must hold"):
        sm_busy_fraction([], 132)
    with pytest.raises(ValueError, match="sms must be"):
        sm_busy_fraction([1], 0)


def benchmark_script():
    """benchmarks/paged_attention.py as a module (under a name of its own: the kernel's module has its file name)."""
    path = ROOT / "benchmarks" / "paged_attention.py"
    spec = importlib.util.spec_from_file_location("paged_attention_benchmark", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_benchmark_script_checks_the_kernel_on_a_cpu(tmp_path):
    rows = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "paged_attention.py"), "--json", str(rows)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout and "target: not measured" in done.stdout
    saved = json.loads(rows.read_text())
    assert saved["rows"] and all(row["correct"] for row in saved["rows"])
    assert {row["name"] for row in saved["rows"]} == {"paged decode, auto", "paged decode, auto, fused",
                                                      "paged decode, grid", "paged decode, grid, fused"}


def test_benchmark_plans_the_quick_ab_and_the_rows_the_book_reads():
    script = benchmark_script()
    ab = ["paged decode, auto", "paged decode, auto, fused", "paged decode, grid", "paged decode, grid, fused"]
    quick = {bench.name: [str(s) for s in sizes] for bench, sizes in script.plan("cuda", quick=True)}
    assert quick == {name: ["B=1 ctx=1024", "B=1 ctx=4096", "B=1 ctx=16384", "B=16 ctx=1024", "B=16 ctx=4096",
                            "B=16 ctx=16384", "B=64 ctx=4096"] for name in ab}
    full = {bench.name: {str(s) for s in sizes} for bench, sizes in script.plan("cuda")}
    assert all(len(full[name]) == 13 for name in ["paged decode", *ab])
    # book/07-inference: decode-kernel.md, paged-attention.md and index.md read these rows
    for name in ("paged decode", "paged decode, split 512", "paged decode, no split"):
        assert {"B=1 ctx=4096", "B=64 ctx=4096", "B=64 ctx=4096 ragged"} <= full[name]
    assert full["paged decode, split 64, fused"] == {"B=1 ctx=512", "B=1 ctx=1024", "B=1 ctx=4096", "B=1 ctx=16384"}


@pytest.mark.gpu  # the lead's run
class TestOnGPU:
    """bf16 at the issue's shape (Llama-3-8B heads, B = 64, context 4096, blocks of 16) vs SDPA on a contiguous copy."""

    def test_llama3_8b_shape_against_sdpa(self):
        script = benchmark_script()  # the benchmark's inputs: scattered pool, contiguous copy for SDPA

        for shape in (script.Shape(64, 4096), script.Shape(64, 4096, ragged=True), script.Shape(1, 16384)):
            args = script.make_inputs(shape, "cuda")
            expected = script.sdpa_contiguous(*args).float()
            for partition in (PARTITION_SIZE, None, "grid", 64):
                for combine in ("kernel", "fused"):
                    out = script.paged(partition_size=partition, combine=combine)(*args).float()
                    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-3,
                                               msg=f"{shape}, partition {partition}, {combine} combine")

    def test_fused_combine_on_two_streams_at_once(self):
        """Each stream gets its own counters: two streams running the fused kernel at once must not mix counts."""
        q, k, v, tables, lens = (torch.from_numpy(x).cuda() for x in paged_case(
            [4096, 3000, 77], n_heads=32, n_kv_heads=8, head_size=128, seed=9))
        q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))

        def decode(combine):
            return paged_attention_decode(q, k, v, tables, lens, partition_size=64, combine=combine,
                                          max_context_len=4096)

        expected = decode("kernel")
        streams = [torch.cuda.Stream() for _ in range(2)]
        torch.cuda.synchronize()
        outs = []
        for _ in range(20):
            for stream in streams:
                with torch.cuda.stream(stream):
                    outs.append(decode("fused"))
        torch.cuda.synchronize()
        for out in outs:
            torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-3)
        assert all(not counts.any() for counts in module._COUNTS.values())
