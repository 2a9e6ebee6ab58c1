"""The ring all-reduce on real processes (gloo): equal to dist.all_reduce, the ring's traffic, and bad input."""

import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from aisys.collectives import ring, traffic
from aisys.collectives.launch import RanksFailed, run_ranks

OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX}
DTYPES = (torch.float32, torch.float64, torch.int64)
# Without the size agreement, whose p - 1 tiny messages are counted on their own below.
ALGORITHMS = {"all_reduce": lambda t, op: ring.all_reduce(t, op, check_sizes=False)}


# ---------------------------------------------------------------------------------------------- chunk_bounds


@pytest.mark.parametrize("n, p", [(0, 1), (0, 3), (1, 4), (3, 5), (10, 4), (12, 4), (97, 5), (10**5, 3)])
def test_chunk_bounds_cover_n_in_p_chunks_larger_first(n, p):
    bounds = ring.chunk_bounds(n, p)
    sizes = [stop - start for start, stop in bounds]
    assert len(bounds) == p and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1


def test_chunk_bounds_example():
    assert ring.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert ring.chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize("n, p, name", [(-1, 2, "n"), (2.0, 2, "n"), (True, 2, "n"), (4, 0, "p"), (4, 1.5, "p")])
def test_chunk_bounds_bad_input_names_the_argument(n, p, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        ring.chunk_bounds(n, p)


# ---------------------------------------------------------------------------------------------- correctness


def _input(n: int, dtype, op: str, rank: int, case: int) -> torch.Tensor:
    """Distinct values per rank; for PRODUCT, floats near 1 (the product stays finite) and small integers."""
    generator = torch.Generator().manual_seed(1000 * case + rank)
    if dtype.is_floating_point:
        x = torch.rand(n, generator=generator, dtype=torch.float64)
        return (0.5 + x if op == "PRODUCT" else 200 * x - 100).to(dtype)
    high = 4 if op == "PRODUCT" else 10**6
    return torch.randint(-high, high, (n,), generator=generator, dtype=dtype)


def _lengths(p: int) -> list[int]:
    return sorted({0, 1, max(p - 1, 1), 13, 1000 + p})  # empty, one element, fewer than p, prime, ragged


def _compare_on_ranks(cases: list) -> list:
    """In each rank: every case's input through each ring algorithm and through dist.all_reduce."""
    rank = dist.get_rank()
    results = []
    for i, (n, dtype, op) in enumerate(cases):
        x = _input(n, dtype, op, rank, i)
        expected = x.clone()
        dist.all_reduce(expected, OPS[op])
        row = {"expected": expected, "input": x.clone()}
        for name, algorithm in ALGORITHMS.items():
            y = x.clone()
            with traffic.record() as log:
                returned = algorithm(y, OPS[op])
            row[name] = (y, returned is y, log.messages)
        results.append(row)
    return results


def _chunks_sent_and_received(rank: int, p: int) -> list[tuple[int, int]]:
    """The ring's 2(p - 1) steps as (chunk sent, chunk received), as ring.py's docstring states them."""
    scatter = [((rank - s) % p, (rank - s - 1) % p) for s in range(p - 1)]
    gather = [((rank + 1 - s) % p, (rank - s) % p) for s in range(p - 1)]
    return scatter + gather


def _check_traffic(messages, rank: int, p: int, n: int, itemsize: int) -> None:
    sent = [m for m in messages if m.kind == "send"]
    received = [m for m in messages if m.kind == "recv"]
    assert {m.peer for m in sent} <= {(rank + 1) % p} and {m.peer for m in received} <= {(rank - 1) % p}
    sizes = [stop - start for start, stop in ring.chunk_bounds(n, p)]
    assert all(0 < m.numel <= max(sizes) for m in sent)  # an empty chunk sends no message
    chunks_sent = [sizes[sent_chunk] for sent_chunk, _ in _chunks_sent_and_received(rank, p)]
    assert sum(m.numel for m in sent) == sum(chunks_sent)
    assert sum(m.numel for m in received) == sum(sizes[got] for _, got in _chunks_sent_and_received(rank, p))
    assert [m.numel for m in sent] == [size for size in chunks_sent if size]
    assert len(sent) == 2 * (p - 1) or n < p
    assert sum(m.nbytes for m in sent) <= 2 * (p - 1) * max(sizes) * itemsize


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_ring_all_reduce_equals_dist_all_reduce(p):
    cases = [(n, dtype, op) for n in _lengths(p) for dtype in DTYPES for op in OPS]
    results = run_ranks(_compare_on_ranks, p, [(cases,)] * p, timeout=10)
    for i, (n, dtype, op) in enumerate(cases):
        # Floats: the ring adds chunk c in the order c, c+1, ... around the ring, gloo in its own
        # order, and float addition is not associative, so the two differ in the last bits.
        rtol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(dtype, 0)
        for name in ALGORITHMS:
            sent_total = 0
            for rank in range(p):
                got, returned_itself, messages = results[rank][i][name]
                where = f"{name}, p={p}, n={n}, {dtype}, {op}, rank {rank}"
                torch.testing.assert_close(got, results[rank][i]["expected"], rtol=rtol, atol=rtol, msg=where)
                assert returned_itself, where
                _check_traffic(messages, rank, p, n, got.element_size())
                sent_total += sum(m.numel for m in messages if m.kind == "send")
            assert sent_total == 2 * (p - 1) * n, name  # 2(p-1)/p of the tensor per rank, summed over p ranks


def _large_on_ranks(n: int):
    rank = dist.get_rank()
    x = torch.arange(n, dtype=torch.int64) * (rank + 1)
    results = []
    for algorithm in (lambda t: ring.all_reduce(t, check_sizes=False), ring.all_reduce):
        y = x.clone()
        with traffic.record() as log:
            algorithm(y)
        results.append((y, log.messages))
    return results


def test_large_tensor_on_four_ranks_sends_two_p_minus_one_messages_of_a_quarter():
    n, p = 10**5, 4
    expected = torch.arange(n, dtype=torch.int64) * (1 + 2 + 3 + 4)
    for rank, per_algorithm in enumerate(run_ranks(_large_on_ranks, p, [(n,)] * p, timeout=10)):
        (plain, plain_messages), (checked, checked_messages) = per_algorithm
        assert torch.equal(plain, expected) and torch.equal(checked, expected)
        agreement = checked_messages[:2 * (p - 1)]  # the size agreement: p - 1 exchanges of three int64s
        assert [(m.kind, m.numel, m.dtype) for m in agreement] == [("send", 3, "int64"), ("recv", 3, "int64")] * (p - 1)
        posted = lambda messages: [(m.kind, m.peer, m.dtype, m.numel) for m in messages]  # noqa: E731 (not seq)
        assert posted(checked_messages[2 * (p - 1):]) == posted(plain_messages)
        sent = [m for m in plain_messages if m.kind == "send"]
        assert len(sent) == 6 and {m.numel for m in sent} == {n // p}


def _phases_on_ranks():
    rank = dist.get_rank()
    x = torch.tensor([float(2**rank)] * 10)
    ring.reduce_scatter(x)
    scattered = x.clone()
    ring.all_gather(x)
    return scattered, x


def test_reduce_scatter_leaves_chunk_r_plus_one_reduced_on_rank_r():
    p = 4
    bounds = ring.chunk_bounds(10, p)
    for rank, (scattered, gathered) in enumerate(run_ranks(_phases_on_ranks, p)):
        start, stop = bounds[(rank + 1) % p]
        assert torch.all(scattered[start:stop] == 15)
        assert torch.all(gathered == 15)


def test_on_step_sees_each_step():
    def on_ranks():
        steps = []
        ring.all_reduce(torch.ones(8), on_step=lambda phase, step: steps.append((phase, step)))
        return steps

    steps = run_ranks(on_ranks, 3)[0]
    assert steps == [("reduce-scatter", 0), ("reduce-scatter", 1), ("all-gather", 0), ("all-gather", 1)]


# ---------------------------------------------------------------------------------------------- bad input


def _raises_on_every_rank(fn, p: int, args, message: str) -> None:
    start = time.monotonic()
    with pytest.raises(RanksFailed) as failed:
        run_ranks(fn, p, args, timeout=10, wall_timeout=20)
    assert time.monotonic() - start < 8  # 2 s of work; the launcher's start-up on loopback sometimes stalls 5 s
    for outcome in failed.value.outcomes:
        assert outcome.status == "raised", failed.value
        assert message in outcome.error, outcome.error


def _all_reduce_on_ranks(algorithm: str, tensor, op=dist.ReduceOp.SUM):
    return getattr(ring, algorithm)(tensor, op)


def test_different_sizes_raise_the_same_error_on_every_rank():
    args = [("all_reduce", torch.ones(8)), ("all_reduce", torch.ones(8)), ("all_reduce", torch.ones(7))]
    _raises_on_every_rank(_all_reduce_on_ranks, 3, args,
                          "ValueError: tensor must have the same number of elements on every rank: rank 2 has 7, "
                          "rank 0 has 8")


def test_different_dtypes_raise_the_same_error_on_every_rank():
    args = [("all_reduce", torch.ones(8)), ("all_reduce", torch.ones(8, dtype=torch.float64))]
    _raises_on_every_rank(_all_reduce_on_ranks, 2, args,
                          "tensor must have the same dtype on every rank: rank 1 has torch.float64, rank 0 has "
                          "torch.float32")


def test_a_non_contiguous_tensor_on_one_rank_raises_on_every_rank():
    args = [("all_reduce", torch.ones(8)), ("all_reduce", torch.ones(16)[::2]), ("all_reduce", torch.ones(8))]
    _raises_on_every_rank(_all_reduce_on_ranks, 3, args, "ValueError: tensor must be contiguous on every rank, and "
                                                         "rank 1's is not")


def test_a_non_contiguous_tensor_raises_without_the_size_check_too():
    def on_ranks():
        return ring.all_reduce(torch.ones(4, 4).T, check_sizes=False)

    _raises_on_every_rank(on_ranks, 2, None, "tensor must be contiguous")


@pytest.mark.parametrize("op", [dist.ReduceOp.AVG, dist.ReduceOp.BAND, "sum"])
def test_unsupported_op_raises_before_any_message(op):
    def on_ranks():
        with traffic.record() as log:
            try:
                ring.all_reduce(torch.ones(4), op)
            except ValueError as error:
                return str(error), log.messages
        return None, log.messages

    for message, messages in run_ranks(on_ranks, 3):
        assert message.startswith("op must be one of dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, "
                                  "dist.ReduceOp.MAX")
        assert messages == []


def test_not_a_tensor_raises_type_error():
    def on_ranks():
        return ring.all_reduce(np.ones(4))

    _raises_on_every_rank(on_ranks, 2, None, "TypeError: tensor must be a torch.Tensor, got ndarray")


# ---------------------------------------------------------------------------------------------- benchmark


def test_benchmark_script_runs_on_a_cpu(tmp_path):
    """benchmarks/allreduce.py at tiny sizes on gloo: it runs, both algorithms agree, and --json holds the rows."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "allreduce.py"), "--world-size", "3",
                           "--max-bytes", "4096", "--reps", "2", "--json", str(tmp_path / "rows.json")],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(root / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no 2 GPUs here" in done.stdout and "ring busbw" in done.stdout
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [r["bytes"] for r in rows] == [1024, 4096] and all(r["correct"] and r["world_size"] == 3 for r in rows)


def test_settings_sweep_refuses_bad_input_by_name_before_starting_ranks():
    from aisys.collectives.allreduce_bench import settings_sweep

    for kwargs, message in (({"settings": []}, "settings must be one or more"),
                            ({"settings": [(8,)]}, "settings must be one or more"),
                            ({"settings": [8]}, "settings must be one or more"),
                            ({"settings": [(0, 8)]}, "channels"),
                            ({"settings": [(8, -1)]}, "slices"),
                            ({"nccl_env": {"PATH": "/"}}, "nccl_env must map NCCL_"),
                            ({"nccl_env": {"NCCL_MIN_P2P_NCHANNELS": 64}}, "nccl_env must map NCCL_")):
        with pytest.raises(ValueError, match=message):
            settings_sweep([2**20], 2, **kwargs)
    with pytest.raises(ValueError, match="multiples of 4 bytes"):
        settings_sweep([6], 2)
    with pytest.raises(ValueError, match="one or more message sizes"):
        settings_sweep([], 2)


def test_settings_table_shows_each_setting_against_nccl():
    from aisys.collectives.allreduce_bench import settings_table

    row = {"bytes": 64 * 2**20, "world_size": 4, "device": "NVIDIA H200", "channels": 8, "slices": 8,
           "seconds": 4.7e-4, "baseline_seconds": 3.6e-4, "busbw": 214e9, "baseline_busbw": 280e9,
           "ratio": 214 / 280, "correct": True}
    text = settings_table([{**row, "nccl_env": {}}, {**row, "nccl_env": {"NCCL_MIN_P2P_NCHANNELS": "64"},
                                                     "correct": False}])
    lines = text.splitlines()
    assert lines[0] == "NVIDIA H200, 4 ranks" and "channels x slices" in lines[1]
    assert lines[3].split() == ["64", "MiB", "(default)", "8", "x", "8", "0.470", "0.360", "214.0", "280.0", "0.76",
                                "yes"]
    assert "NCCL_MIN_P2P_NCHANNELS=64" in lines[4] and lines[4].endswith("NO")


@pytest.mark.parametrize("command", [["allreduce.py", "--settings"], ["allreduce.py", "--symmetric"],
                                     ["symmetric_ring_steps.py"]])
def test_benchmark_gpu_modes_need_gpus(command):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / command[0]), *command[1:]],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(root / "src")})
    assert done.returncode != 0 and "it needs 2 or more GPUs, found 0" in done.stderr


# ---------------------------------------------------------------------------------------------- the check's words


class TimedOutStudent:
    """Every rank of the first case timed out in a send."""

    def call_ranks(self, function, cases, *, world_size, **_):
        error = "RuntimeError: [unbound_buffer.cc:129] Timed out waiting 5000ms for send operation to complete"
        return [[{"value": None, "tensors": [], "messages": [], "error": error} for _ in range(world_size)]]


def test_a_send_that_timed_out_is_said_as_seen_with_both_likely_causes():
    from aisys_grader import checks_for, run

    result = run(checks_for("06-collectives/ring_allreduce")["ring_all_reduce"], TimedOutStudent(), hidden=True)
    assert "rank 0 raised RuntimeError (its message is not shown here" in result.message
    assert "its send to rank 1 was not taken within the timeout" in result.message
    assert "blocking dist.send" in result.message and "never waited on it" in result.message
