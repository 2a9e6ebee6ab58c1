"""The eight primitives on simulated ranks: the same result as torch.distributed on real ranks, their identities,
their naive traffic, and clear errors on bad input."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

from aisys.collectives import simulated
from aisys.collectives.launch import run_ranks

ROOTED = ("broadcast", "scatter", "gather", "reduce")
REDUCING = ("reduce", "all_reduce", "reduce_scatter")
SPLITTING = ("scatter", "reduce_scatter", "all_to_all")
DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8")


def _torch_collective(name: str, x: np.ndarray, root: int, op: str) -> np.ndarray | None:
    """Run the torch.distributed collective `name` on this rank's buffer; what this rank holds after, or None
    where torch leaves it undefined (a non-root rank after reduce)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    t = torch.from_numpy(x.copy())
    reduce_op = getattr(dist.ReduceOp, op.upper())
    if name == "broadcast":
        dist.broadcast(t, src=root)
    elif name == "scatter":
        out = torch.empty_like(t.chunk(p)[0])
        dist.scatter(out, list(t.chunk(p)) if rank == root else None, src=root)
        t = out
    elif name == "gather":
        parts = [torch.empty_like(t) for _ in range(p)] if rank == root else None
        dist.gather(t, parts, dst=root)
        t = torch.cat(parts) if rank == root else t
    elif name == "reduce":
        dist.reduce(t, dst=root, op=reduce_op)
        if rank != root:
            return None
    elif name == "all_reduce":
        dist.all_reduce(t, op=reduce_op)
    elif name == "all_gather":
        out = torch.empty((p * t.shape[0], *t.shape[1:]), dtype=t.dtype)
        dist.all_gather_single(out, t)
        t = out
    elif name == "reduce_scatter":
        out = torch.empty_like(t.chunk(p)[0])
        dist.reduce_scatter_single(out, t, op=reduce_op)
        t = out
    elif name == "all_to_all":
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t)
        t = out
    return t.numpy().copy()


def _run_cases(cases):
    return [_torch_collective(*case) for case in cases]


def _cases(rng, p: int) -> list[tuple]:
    """(collective, per-rank buffers, root, op) for every collective, root, op and dtype, ragged-free shapes."""
    cases = []
    for name in simulated.COLLECTIVES:
        for dtype in DTYPES:
            root = int(rng.integers(p))
            op = str(rng.choice(list(simulated.OPS))) if name in REDUCING else "sum"
            shape = (p * int(rng.integers(1, 3)),) if dtype != "float64" else (p, 2)  # a 2-D case too
            cases.append((name, _buffers(rng, p, shape, dtype, op), root, op))
    for root in range(p):  # every root position for the rooted ones
        cases += [(name, _buffers(rng, p, (p,), "int32", "sum"), root, "sum") for name in ROOTED]
    return cases


def _buffers(rng, p, shape, dtype, op) -> list[np.ndarray]:
    """Small integers, exact in every dtype and in any order of summation; int8 sums overflow and wrap."""
    if op == "product":
        values = [rng.choice([-2, -1, 1, 2], size=shape) for _ in range(p)]
    elif dtype == "int8":
        values = [rng.integers(60, 120, size=shape) for _ in range(p)]  # two of these overflow int8
    else:
        values = [rng.integers(0, 50, size=shape) for _ in range(p)]
    if dtype == "uint8":
        values = [np.abs(v) for v in values]
    return [v.astype(dtype) for v in values]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_each_primitive_gives_what_torch_distributed_gives_on_real_ranks(world_size):
    rng = np.random.default_rng(world_size)
    cases = _cases(rng, world_size)
    per_rank = [[(name, buffers[rank], root, op) for name, buffers, root, op in cases] for rank in range(world_size)]
    results = run_ranks(_run_cases, world_size, [(args,) for args in per_rank], timeout=20, wall_timeout=120)
    for i, (name, buffers, root, op) in enumerate(cases):
        expected = getattr(simulated, name)(buffers, **({"root": root} if name in ROOTED else {}),
                                            **({"op": op} if name in REDUCING else {}))
        for rank in range(world_size):
            torch_result = results[rank][i]
            if torch_result is None:  # a non-root rank after reduce: undefined in torch, unchanged here
                np.testing.assert_array_equal(expected[rank], buffers[rank])
                continue
            assert expected[rank].dtype == torch_result.dtype, (name, rank)
            np.testing.assert_array_equal(expected[rank], torch_result, err_msg=f"{name} {op} root {root} rank {rank}")


def _call(name, buffers, root=0, op="sum"):
    kwargs = ({"root": root} if name in ROOTED else {}) | ({"op": op} if name in REDUCING else {})
    return getattr(simulated, name)(buffers, **kwargs)


@pytest.mark.parametrize("name", simulated.COLLECTIVES)
def test_pure_new_arrays_and_inputs_untouched(name):
    buffers = [np.arange(6.0) + 10 * r for r in range(3)]
    before = [b.copy() for b in buffers]
    result = _call(name, buffers, root=1)
    assert len(result) == 3 and result is not buffers
    for out in result:
        out += 1000  # writing to a result must not reach an input or another rank's result
        assert not any(np.shares_memory(out, b) for b in buffers)
    for b, original in zip(buffers, before):
        np.testing.assert_array_equal(b, original)
    assert len({id(out) for out in result}) == 3


@pytest.mark.parametrize("p", [1, 2, 3, 5, 6])
@pytest.mark.parametrize("op", list(simulated.OPS))
def test_all_reduce_is_reduce_scatter_then_all_gather_and_reduce_then_broadcast(p, op):
    rng = np.random.default_rng(p)
    buffers = [rng.integers(-5, 6, size=(2 * p, 3)) for _ in range(p)]
    expected = simulated.all_reduce(buffers, op)
    for root in range(p):
        for a, b in zip(simulated.broadcast(simulated.reduce(buffers, root, op), root), expected):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(simulated.all_gather(simulated.reduce_scatter(buffers, op)), expected):
        np.testing.assert_array_equal(a, b)


def test_shapes_and_block_placement():
    p = 4
    buffers = [np.array([10 * r + j for j in range(p)]) for r in range(p)]  # rank r block j = 10r + j
    assert [b.tolist() for b in simulated.all_to_all(buffers)] == [[10 * r + j for r in range(p)] for j in range(p)]
    assert [b.tolist() for b in simulated.scatter(buffers, 2)] == [[20 + j] for j in range(p)]
    gathered = simulated.gather(buffers, 3)
    assert gathered[3].tolist() == [10 * r + j for r in range(p) for j in range(p)]
    assert [gathered[r].tolist() for r in range(3)] == [buffers[r].tolist() for r in range(3)]
    assert [b.tolist() for b in simulated.reduce_scatter(buffers, "max")] == [[30 + j] for j in range(p)]


def test_all_to_all_twice_is_the_identity_and_scatter_undoes_all_gather():
    rng = np.random.default_rng(0)
    buffers = [rng.normal(size=(6, 2)) for _ in range(3)]
    for a, b in zip(simulated.all_to_all(simulated.all_to_all(buffers)), buffers):
        np.testing.assert_array_equal(a, b)
    for root in range(3):
        for a, b in zip(simulated.scatter(simulated.all_gather(buffers), root), buffers):
            np.testing.assert_array_equal(a, b)


def test_reductions_keep_the_dtype_and_wrap_small_integers():
    buffers = [np.array([100, -100], dtype=np.int8)] * 3
    out = simulated.all_reduce(buffers)[0]
    assert out.dtype == np.int8 and out.tolist() == [44, -44]  # 300 - 256, -300 + 256
    assert simulated.all_reduce([np.array([2], dtype=np.uint8)] * 9, "product")[0].tolist() == [0]  # 512 mod 256


def test_world_size_one_gives_each_buffer_back():
    buffers = [np.arange(3.0)]
    for name in simulated.COLLECTIVES:
        np.testing.assert_array_equal(_call(name, buffers)[0], buffers[0])


@pytest.mark.parametrize("p", [1, 2, 4, 8, 64])
def test_naive_traffic_formulas(p):
    n = 1024.0 * p
    assert simulated.naive_traffic("broadcast", p, n, root=p - 1).sent == tuple([0.0] * (p - 1) + [(p - 1) * n])
    reduce = simulated.naive_traffic("reduce", p, n)
    assert reduce.received[0] == (p - 1) * n and reduce.sent[1:] == (n,) * (p - 1) and reduce.sent[0] == 0
    assert simulated.naive_traffic("scatter", p, n).sent[0] == (p - 1) * n / p
    assert simulated.naive_traffic("gather", p, n).received[0] == (p - 1) * n
    assert simulated.naive_traffic("all_gather", p, n).sent == ((p - 1) * n,) * p
    assert simulated.naive_traffic("all_to_all", p, n).received == ((p - 1) * n / p,) * p
    server = simulated.naive_traffic("all_reduce", p, n)
    assert server == reduce + simulated.naive_traffic("broadcast", p, n)
    assert server.busiest == (p - 1) * n  # the parameter server's link, each way
    ring = simulated.naive_traffic("reduce_scatter", p, n) + simulated.naive_traffic("all_gather", p, n / p)
    assert ring.sent == ring.received == (2 * (p - 1) / p * n,) * p


def test_naive_traffic_totals_equal_on_both_sides():
    for name in simulated.COLLECTIVES:
        for root in range(5):
            t = simulated.naive_traffic(name, 5, 1000, root)
            assert sum(t.sent) == pytest.approx(sum(t.received)), name


@pytest.mark.parametrize("call, argument", [
    (lambda: simulated.broadcast(np.zeros((2, 3)), 0), "buffers"),
    (lambda: simulated.broadcast([], 0), "buffers"),
    (lambda: simulated.all_reduce([np.zeros(3), [1, 2, 3]]), r"buffers\[1\]"),
    (lambda: simulated.all_gather([np.zeros(3), np.zeros(4)]), "buffers"),
    (lambda: simulated.all_gather([np.zeros(3), np.zeros(3, dtype=np.int32)]), "buffers"),
    (lambda: simulated.all_gather([np.float64(1.0)]), "buffers"),
    (lambda: simulated.all_gather([np.array(1.0)]), r"buffers\[0\]"),
    (lambda: simulated.all_gather([np.array(["a"])]), r"buffers\[0\]"),
    (lambda: simulated.scatter([np.zeros(4)] * 3, 0), "buffers must split into 3"),
    (lambda: simulated.reduce_scatter([np.zeros(5)] * 2), "buffers must split into 2"),
    (lambda: simulated.all_to_all([np.zeros((3, 2))] * 2), "buffers must split into 2"),
    (lambda: simulated.broadcast([np.zeros(2)] * 3, 3), "root must be a rank from 0 to 2"),
    (lambda: simulated.gather([np.zeros(2)] * 3, -1), "root"),
    (lambda: simulated.reduce([np.zeros(2)] * 3, 1.0), "root"),
    (lambda: simulated.reduce([np.zeros(2)] * 3, True), "root"),
    (lambda: simulated.reduce([np.zeros(2)] * 3, 0, "prod"), "op must be one of 'sum', 'product'"),
    (lambda: simulated.all_reduce([np.zeros(2)], op="SUM"), "op"),
    (lambda: simulated.naive_traffic("allreduce", 4, 10), "collective"),
    (lambda: simulated.naive_traffic("reduce", 0, 10), "world_size"),
    (lambda: simulated.naive_traffic("reduce", 4, -1), "nbytes"),
    (lambda: simulated.naive_traffic("reduce", 4, 10, root=4), "root"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises((ValueError, TypeError), match=argument):
        call()
