"""The tuned ring (aisys.collectives.pipelined_ring) on real processes: bit-equal to the readable ring, the same
bytes to the same neighbours in slices, over several channels, and bad input. Its CUDA graph runs on 2 GPUs."""

import pytest
import torch
import torch.distributed as dist

from aisys.collectives import pipelined_ring, ring, traffic
from aisys.collectives.launch import run_ranks

OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MAX": dist.ReduceOp.MAX}


def _input(n, dtype, op, rank, case):
    generator = torch.Generator().manual_seed(100 * case + rank)
    x = torch.rand(n, generator=generator, dtype=torch.float64)
    x = 0.5 + x if op == "PRODUCT" else 200 * x - 100
    return x.to(dtype) if dtype.is_floating_point else (x * 1000).to(dtype)


def _run_cases(cases):
    """Each case through the readable ring and the pipelined one (on 3 channels where asked), with the messages."""
    rank = dist.get_rank()
    channels = pipelined_ring.ring_channels(3)
    results = []
    for i, (n, dtype, op, slices, use_channels) in enumerate(cases):
        x = _input(n, dtype, op, rank, i)
        expected = ring.all_reduce(x.clone(), OPS[op])
        y = x.clone()
        with traffic.record() as log:
            returned = pipelined_ring.all_reduce(y, OPS[op], slices=slices, check_sizes=False,
                                                 channels=channels if use_channels else None)
        results.append((expected, y, returned is y, log.messages))
    return results


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_pipelined_ring_is_the_readable_ring_bit_for_bit_with_its_bytes_in_slices(p):
    cases = [(n, dtype, op, slices, use_channels)
             for n in sorted({0, 1, max(p - 1, 1), 13, 1000 + p}) for dtype in (torch.float32, torch.int64)
             for op in OPS for slices in (1, 3, 7) for use_channels in (False, True)]
    results = run_ranks(_run_cases, p, [(cases,)] * p, timeout=20, wall_timeout=120)
    for i, (n, dtype, op, slices, use_channels) in enumerate(cases):
        sizes = [stop - start for start, stop in ring.chunk_bounds(n, p)]
        for rank in range(p):
            expected, got, returned_itself, messages = results[rank][i]
            where = f"p={p}, n={n}, {dtype}, {op}, slices {slices}, channels {use_channels}, rank {rank}"
            # The same additions in the same order, element by element: equal to the last bit, floats included.
            assert torch.equal(got, expected), where
            assert returned_itself, where
            sent = [m for m in messages if m.kind == "send"]
            received = [m for m in messages if m.kind == "recv"]
            assert {m.peer for m in sent} <= {(rank + 1) % p} and {m.peer for m in received} <= {(rank - 1) % p}
            chunks_sent = [(rank - s) % p for s in range(p - 1)] + [(rank + 1 - s) % p for s in range(p - 1)]
            chunks_received = [(rank - s - 1) % p for s in range(p - 1)] + [(rank - s) % p for s in range(p - 1)]
            assert sum(m.numel for m in sent) == sum(sizes[c] for c in chunks_sent), where
            assert sum(m.numel for m in received) == sum(sizes[c] for c in chunks_received), where
            # each step's chunk goes in slices no larger than ceil(chunk / slices)
            assert all(0 < m.numel <= -(-max(sizes) // slices) for m in sent), where
            assert len(sent) <= 2 * (p - 1) * slices, where


def _messages_per_step(n, slices):
    x = torch.ones(n, dtype=torch.int64)
    with traffic.record() as log:
        pipelined_ring.all_reduce(x, slices=slices, check_sizes=False)
    return [m.numel for m in log.messages if m.kind == "send"], x


def test_four_ranks_send_two_p_minus_one_chunks_each_in_its_slices():
    n, p, slices = 4000, 4, 4
    for sent, x in run_ranks(_messages_per_step, p, [(n, slices)] * p, timeout=10):
        assert torch.equal(x, torch.full((n,), p))
        assert sent == [n // p // slices] * (2 * (p - 1) * slices)  # 6 steps of a 1000-element chunk, 4 slices each


def test_default_slices_one_per_channel_then_by_chunk_size():
    mib = 2**20
    assert pipelined_ring.default_slices(64 * mib, 4, channels=8) == 8
    assert pipelined_ring.default_slices(2**30, 4, channels=8) == 16  # chunks of 256 MiB: 16 slices of 16 MiB
    assert pipelined_ring.default_slices(2**30, 2, channels=1) == pipelined_ring.MAX_SLICES
    assert pipelined_ring.default_slices(1024, 4) == 1


@pytest.mark.parametrize("kwargs, name", [({"p": 0}, "p"), ({"channels": 0}, "channels")])
def test_default_slices_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        pipelined_ring.default_slices(**{"nbytes": 1024, "p": 2, **kwargs})


def _bad_slices():
    try:
        pipelined_ring.all_reduce(torch.ones(8), slices=0)
    except ValueError as error:
        return str(error)


def test_bad_slices_is_refused_by_name():
    assert all(message.startswith("slices must be") for message in run_ranks(_bad_slices, 2, timeout=10))


def test_captured_ring_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="tensor must be a CUDA tensor"):
        pipelined_ring.CapturedAllReduce(torch.ones(4))


def _captured_on_gpu(n):
    rank, p = dist.get_rank(), dist.get_world_size()
    x = torch.full((n,), float(rank + 1), device="cuda")
    captured = pipelined_ring.CapturedAllReduce(x, channels=pipelined_ring.ring_channels(2))
    results = []
    for scale in (1.0, 3.0):  # replays reduce whatever the tensor holds then, in place
        x.fill_(scale * (rank + 1))
        captured()
        torch.cuda.synchronize()
        results.append(bool((x == scale * p * (p + 1) / 2).all()))
    return results


@pytest.mark.gpu
def test_captured_ring_replays_on_two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    assert run_ranks(_captured_on_gpu, 2, [(2**20 + 3,)] * 2, backend="nccl", timeout=60) == [[True, True]] * 2


@pytest.mark.parametrize("nbytes, n_ranks, expected", [
    (16 * 2**20, 4, 8),     # the 4-GPU ring's chunk at 64 MiB: a quarter of the per-peer channels
    (64 * 2**20, 4, 8),
    (256 * 2**20, 4, 16),   # parts over 32 chunks of 512 KiB double the channels
    (16 * 2**20, 2, 16),    # the 2-GPU ring at the same chunk: twice the channels
    (512 * 2**20, 2, 32),
    (100_000, 4, 2),        # small messages: parts of at least 64 KiB
])
def test_nccl_p2p_channels_follows_nccls_rule(nbytes, n_ranks, expected):
    assert pipelined_ring.nccl_p2p_channels(nbytes, n_ranks, p2p_channels=32, per_peer=32) == expected


def test_nccl_p2p_channels_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="^n_ranks must be"):
        pipelined_ring.nccl_p2p_channels(1024, 0, 32, 32)
