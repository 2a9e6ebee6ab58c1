"""The ring over memory every rank can read (aisys.collectives.symmetric_ring): its schedule needs one barrier
between steps, it is the readable ring bit for bit on CPU processes sharing files, with barriers and in one kernel
ordered by flags (aisys.triton_kernels.ring_all_reduce), bad input is refused by name, and on GPUs it sums over
symmetric memory."""

import os

import pytest
import torch
import torch.distributed as dist

from aisys.collectives import allreduce_bench, ring
from aisys.collectives.launch import run_ranks
from aisys.collectives.symmetric_ring import SymmetricRing, steps

OPS = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "PRODUCT": dist.ReduceOp.PRODUCT}


@pytest.mark.parametrize("p", range(1, 9))
def test_within_a_step_no_rank_writes_a_chunk_its_successor_reads(p):
    schedule = [steps(p, r) for r in range(p)]
    assert all(len(s) == 2 * (p - 1) for s in schedule)
    for step in range(2 * (p - 1)):
        for r in range(p):
            written, read_by_successor = schedule[r][step][1], schedule[(r + 1) % p][step][1]
            assert written != read_by_successor, (p, step, r)


@pytest.mark.parametrize("p", range(1, 9))
def test_the_schedule_run_step_by_step_leaves_every_rank_the_sum(p):
    # a step reads the predecessor's buffer as the previous step left it: what a barrier between steps gives
    buffers = [[frozenset({r}) for _ in range(p)] for r in range(p)]  # rank r's chunk c: the ranks summed in it
    for step in range(2 * (p - 1)):
        before = [list(b) for b in buffers]
        for r in range(p):
            kind, c = steps(p, r)[step]
            previous = before[(r - 1) % p][c]
            if kind == "reduce":
                assert not previous & before[r][c], "no rank's input is added twice"
            buffers[r][c] = before[r][c] | previous if kind == "reduce" else previous
    assert all(chunk == frozenset(range(p)) for b in buffers for chunk in b)


@pytest.mark.parametrize("kwargs, message", [
    ({"p": 0, "rank": 0}, "p must be"),
    ({"p": 3, "rank": 3}, r"rank must be an integer in \[0, 3\), got 3"),
    ({"p": 3, "rank": -1}, r"rank must be an integer in \[0, 3\), got -1"),
])
def test_steps_bad_input_names_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        steps(**kwargs)


def _input(n, dtype, op, rank, case):
    generator = torch.Generator().manual_seed(100 * case + rank)
    x = torch.rand(n, generator=generator, dtype=torch.float64)
    return (0.5 + x if op == "PRODUCT" else 200 * x - 100).to(dtype)


def _symmetric_against_readable(folder, cases):
    rank = dist.get_rank()
    results = []
    for i, (n, dtype, op) in enumerate(cases):
        x = _input(n, dtype, op, rank, i)
        files = os.path.join(folder, str(i))
        os.makedirs(files, exist_ok=True)
        symmetric = SymmetricRing.in_files(n, files, dtype, slices=1 + i % 3)
        got = []
        for method in (symmetric.all_reduce,) + (symmetric.all_reduce_in_one_kernel,) * _one_kernel_runs(n, dtype, op):
            symmetric.buffer.copy_(x)
            returned = method(OPS[op])
            got.append((returned.clone(), returned is symmetric.buffer))
        results.append((ring.all_reduce(x, OPS[op]), got))
    return results


def _one_kernel_runs(n, dtype, op) -> int:
    """The kernel's runs of a case: every dtype and op on the longest buffer, float32 sums on every length, and
    those twice (its flags count on from the first call). Fewer than the barriers' runs: in the interpreter each
    waiting rank spins on a CPU core the others need."""
    return 2 if dtype == torch.float32 and op == "SUM" else int(n > 1000)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_on_shared_files_it_is_the_readable_ring_bit_for_bit(p, tmp_path):
    cases = [(n, dtype, op) for n in sorted({1, max(p - 1, 1), 13, 1000 + p})
             for dtype in (torch.float32, torch.bfloat16) for op in OPS]
    for results in run_ranks(_symmetric_against_readable, p, [(str(tmp_path), cases)] * p, timeout=60):
        for (expected, got), case in zip(results, cases):
            assert len(got) == 1 + _one_kernel_runs(*case), case
            for (result, in_place), method in zip(got, ("barriers", "one kernel", "one kernel again")):
                assert in_place, (case, method)
                assert result.dtype == expected.dtype and torch.equal(result, expected), (case, method)


@pytest.mark.parametrize("call, message", [
    (lambda folder: SymmetricRing.in_files(0, folder), "numel must be"),
    (lambda folder: SymmetricRing.in_files(4, folder, torch.int32), "dtype must be a floating torch.dtype"),
    (lambda folder: SymmetricRing.in_files(4, os.path.join(folder, "absent")), "folder must be an existing"),
])
def test_bad_input_is_refused_by_name(call, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        call(str(tmp_path))


def _second_ring_in(folder):
    SymmetricRing.in_files(4, folder)
    try:
        SymmetricRing.in_files(4, folder)
    except ValueError as error:
        return str(error)


def test_a_second_ring_in_the_same_folder_is_refused(tmp_path):
    messages = run_ranks(_second_ring_in, 2, [(str(tmp_path),)] * 2, timeout=60)
    assert all(f"already holds rank {rank}'s buffer: each ring needs a folder of its own" in message
               for rank, message in enumerate(messages)), messages


def test_on_gpus_without_a_gpu_says_what_to_use_instead():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="needs CUDA GPUs .* use SymmetricRing.in_files"):
        SymmetricRing.on_gpus(4)


def test_the_benchmark_times_it_on_cpu_processes_beside_gloo():
    rows = allreduce_bench.compare([4, 4 * 2**10 + 4, 4], world_size=3, reps=1, warmup=1,
                                   extra=allreduce_bench.ON_SYMMETRIC_MEMORY)
    assert all(row["correct"] and row["symmetric_seconds"] > 0 and row["one kernel_seconds"] > 0 for row in rows)
    assert "symmetric/gloo" in allreduce_bench.table(rows) and "one kernel/gloo" in allreduce_bench.table(rows)
    with pytest.raises(ValueError, match=r"extra algorithms \['pipelined'\] run on NCCL only"):
        allreduce_bench.compare([4], world_size=2, extra=(allreduce_bench.SYMMETRIC, "pipelined"))


@pytest.mark.gpu
def test_beside_the_tuned_ring_on_gpus_nothing_hangs():
    # captured on the symmetric buffer, the tuned ring hung every GPU unless NCCL_GRAPH_REGISTER=0 (compare sets it)
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    rows = allreduce_bench.compare([64 * 2**20], torch.cuda.device_count(), backend="nccl", reps=2, warmup=1,
                                   extra=(allreduce_bench.TUNED, *allreduce_bench.ON_SYMMETRIC_MEMORY))
    assert rows[0]["correct"] and rows[0]["nccl_env"] == {"NCCL_GRAPH_REGISTER": "0"}


def _on_gpus(n):
    rank, p = dist.get_rank(), dist.get_world_size()
    symmetric = SymmetricRing.on_gpus(n)
    results = []
    for method in (symmetric.all_reduce, symmetric.all_reduce_in_one_kernel):
        for scale in (1.0, 3.0):  # the buffer is reduced again, whatever it holds
            symmetric.buffer.fill_(scale * (rank + 1))
            method()
            torch.cuda.synchronize()
            results.append(bool((symmetric.buffer == scale * p * (p + 1) / 2).all()))
        x = _input(n, torch.float32, "SUM", rank, 0).cuda()
        symmetric.buffer.copy_(x)
        results.append(torch.equal(method().cpu(), ring.all_reduce(x).cpu()))
    for _ in range(50):  # back to back, as a benchmark runs it: a missing wait shows as a wrong sum
        symmetric.buffer.fill_(rank + 1)
        symmetric.all_reduce_in_one_kernel()
    results.append(bool((symmetric.buffer == p * (p + 1) / 2).all()))
    return results


@pytest.mark.gpu
def test_on_gpus_it_sums_over_symmetric_memory():
    for p in sorted({2, torch.cuda.device_count()}):
        if torch.cuda.device_count() < p:
            pytest.skip("needs 2 GPUs")
        for n in (2**20 + 3, 2**24):  # chunks of any length, and 16-byte aligned ones (vector loads)
            assert run_ranks(_on_gpus, p, [(n,)] * p, backend="nccl", timeout=60) == [[True] * 7] * p, (p, n)
