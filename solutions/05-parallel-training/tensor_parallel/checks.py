"""Checks: a tensor-parallel MLP and attention (Megatron-LM) on real processes.

Every function runs on ranks through the trusted harness `aisys.parallel.harness.tensor_parallel`,
all cases of one world size in one `call_ranks`: the shard functions on one rank (their results
and the errors they raise, whose text the grader reads and quotes only for visible cases); f and
g alone on three ranks, on inputs and upstream gradients that differ on every rank; the MLP and
attention on 1, 2 and 4 ranks, each rank building the whole layer in float64 from a seed and
cutting its own shard (not with the student's shard function: one mistake, one failed check),
the forward and backward recorded with the collectives of each pass. The grader computes the
unsharded layer with the reference on the same seed and compares.
"""

import re

import numpy as np
import torch

from aisys.parallel import tensor_parallel as reference
from aisys.parallel.harness import tensor_parallel as harness

from aisys_grader.checks import check, require_gpu
from aisys_grader.compare import CheckFailure, describe, raised, shown, unredacted

HARNESS = "aisys.parallel.harness.tensor_parallel"
# float64 throughout: a rank's partial sums added in another order than the unsharded product's differ by a few
# tens of eps (2.2e-16) times the magnitudes, about 1e-14 at these sizes (values of order 1); anything computed in
# float32 on the way (eps 1.2e-7) is off by about 1e-7. 1e-9 of the result's scale lies between, with room.
RELATIVE = 1e-9
MLP_SIZES = [(1, [4, 8], 8, 16)]  # visible cases: (seed, x's shape, C, F)
ATTENTION_SIZES = [(2, 2, 4, 8, 4, True)]  # visible cases: (seed, B, T, C, n_heads, causal)


# ---------------------------------------------------------------------------------------------- comparing


def _difference(got, expected: torch.Tensor) -> float | None:
    """The largest difference relative to the expected tensor's scale; None if `got` is missing or misshapen."""
    if not isinstance(got, np.ndarray) or got.shape != tuple(expected.shape):
        return None
    expected = expected.detach().numpy()
    return float(np.max(np.abs(got - expected), initial=0.0)) / max(1.0, float(np.max(np.abs(expected), initial=0)))


def _near(got, candidate: torch.Tensor) -> bool:
    difference = _difference(got, candidate)
    return difference is not None and difference <= RELATIVE


def _compare(what: str, got, expected: torch.Tensor, hints: list[tuple[torch.Tensor, str]] = ()) -> None:
    """CheckFailure unless `got` equals `expected` within RELATIVE of its scale; the hint of the first candidate
    (a known mistake's result) that `got` equals instead."""
    difference = _difference(got, expected)
    if difference is None:
        kind = describe(got) if got is not None else "nothing (None: no gradient reached it)"
        raise CheckFailure(f"{what} should be an array of shape {tuple(expected.shape)}, got {kind}")
    if difference <= RELATIVE:
        return
    hint = next((text for candidate, text in hints if _near(got, candidate)), "")
    size = unredacted(f" ({difference:.3g} of its scale; the tolerance is {RELATIVE:g})")
    raise CheckFailure(f"{what} differs from the unsharded layer's{size}" + (f": {hint}" if hint else ""))


def _error(outcome: dict, what: str) -> None:
    """CheckFailure naming what a rank raised (its message only where visible)."""
    if outcome.get("error"):
        raise CheckFailure(f"{what} raised {raised(outcome['error'])}")
    value = outcome.get("value")
    if not isinstance(value, dict):
        raise CheckFailure(f"{what} gave no readable result")
    for key in ("forward_error", "backward_error"):
        if value.get(key):
            passes = "the forward pass" if key == "forward_error" else "the backward pass"
            raise CheckFailure(f"{what}: {passes} raised {raised(value[key])}")


def _listed(collectives: list[dict]) -> str:
    if not collectives:
        return "none"
    # a collective's name is the recorder's, but hidden runs quote only all_reduce's (the test for leaks cannot tell
    # a name the recorder gave from a string the student's code returned)
    def name(c):
        return "all_reduce" if c.get("name") == "all_reduce" else unredacted(str(c.get("name")), "another collective")

    return ", ".join(f"{name(c)} of {unredacted(str(c.get('numel')), 'n')} elements" for c in collectives)


def _check_collectives(what: str, value: dict, numel: int, world_size: int, forward: int = 1,
                       backward: int = 1) -> None:
    """Exactly `forward` all_reduce(s) forward and `backward` backward, each of `numel` elements (none required on
    one rank, where an all-reduce may be skipped)."""
    for phase, wanted, why in (("forward", forward, "g sums the ranks' partial outputs"),
                               ("backward", backward, "f sums the ranks' contributions to the input's gradient")):
        got = value.get(phase) or []
        allowed = (0, wanted) if world_size == 1 else (wanted,)
        right = all(c.get("name") == "all_reduce" and c.get("numel") == numel for c in got)
        if len(got) in allowed and right:
            continue
        size = unredacted(f"{numel} elements", "the activation's size")
        expected = f"one all_reduce of {size} ({why})" if wanted else "no collective"
        names = {str(c.get("name")) for c in got}
        if any("gather" in name for name in names):
            hint = (": only an all-reduce sums partial results in one collective (gathering every rank's piece "
                    "receives p times the data and leaves the sum to be done on each rank)")
        elif len(got) > wanted:
            hint = (": every extra collective is another pass over the interconnect on the critical path; f "
                    "communicates only in the backward pass and g only in the forward, once each")
        elif got:
            hint = ": the all-reduce should carry the activation (x's size), nothing larger or smaller"
        else:
            hint = f": nothing was summed, yet {why}"
        raise CheckFailure(f"{what}: the {phase} pass posted {_listed(got)}; expected {expected}{hint}")


def _label(hidden: bool, i: int, count: int) -> str:
    return f"{'hidden case' if hidden else 'case'} {i} of {count}"


# ---------------------------------------------------------------------------------------------- sharding


def _distinct(*shape) -> np.ndarray:
    """A float64 array whose elements are all different, so a wrong slice is told apart from the right one."""
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 0.5


def _shard_all(student, name: str, args: list[tuple]) -> list[dict]:
    """The student's shard function on every case in one call on one rank: {"shards", "error"} per case."""
    outcomes = student.call_ranks(name, [[(name, *a)] for a in args], world_size=1, harness=f"{HARNESS}.shard")
    results = []
    for case in outcomes:
        if case[0].get("error"):
            raise CheckFailure(f"{name} raised {raised(case[0]['error'])}")
        results.append(case[0]["value"])
    return results


def _check_refused(got: dict, argument: str, world_size: int, call: str) -> None:
    """The shard function must raise ValueError naming `argument` and what was expected (world_size's multiple)."""
    error = got["error"]
    if not error:
        raise CheckFailure(f"{call} returned shards; it should raise ValueError: the split is not even, so the "
                           "ranks would hold parts of different sizes (or drop the remainder)")
    if not error.startswith("ValueError"):
        raise CheckFailure(f"{call} raised {raised(error)}; it should raise ValueError")
    message = error.split(":", 1)[1] if ":" in error else ""
    if not re.search(rf"\b{argument}\b", message) or str(world_size) not in message:
        raise CheckFailure(f"{call} raised {raised(error)}, whose message should name `{argument}` and what was "
                           f"expected (a multiple of world_size = {shown(world_size)})")


def _check_shards(call: str, got: dict, expected: tuple, names: tuple, hints) -> None:
    shards = got.get("shards") if isinstance(got, dict) else None
    if got.get("error"):
        raise CheckFailure(f"{call} raised {raised(got['error'])}")
    if not isinstance(shards, list) or len(shards) != len(expected):
        raise CheckFailure(f"{call} should return {len(expected)} shards ({', '.join(names)}), got "
                           f"{describe(shards)}")
    for shard, want, label in zip(shards, expected, names):
        if isinstance(shard, np.ndarray) and shard.shape == want.shape and np.array_equal(shard, want):
            continue
        hint = next((text for candidate, text in hints.get(label, []) if isinstance(shard, np.ndarray)
                     and shard.shape == candidate.shape and np.array_equal(shard, candidate)), "")
        raise CheckFailure(f"{call}: {label} should be of shape {want.shape}, got {describe(shard)}"
                           + (f": {hint}" if hint else ""))


@check(points=1)
def shard_mlp(student, rng, hidden):
    """shard_mlp cuts w1 and b1 by columns, w2 by the same rows; an uneven split raises ValueError naming w1, a rank
    out of range one naming rank."""
    cases = [(4, 8, 1, 2), (3, 8, 3, 4), (5, 4, 0, 1)]  # (C, F, rank, world_size)
    if hidden:
        for _ in range(4):
            p = int(rng.choice([2, 3, 4, 8]))
            cases.append((int(rng.integers(1, 7)), p * int(rng.integers(1, 5)), int(rng.integers(0, p)), p))
    refused = [(4, 6, 0, 4, "w1")] + ([(3, 10, 1, 4, "w1"), (2, 9, 0, 2, "w1")] if hidden else [])
    refused.append((2, 4, 2, 2, "rank"))
    args = []
    for width, hid, rank, p, *_ in cases + refused:
        args.append((_distinct(width, hid), _distinct(hid) * -1, _distinct(hid, width) + 1000, rank, p))
    results = _shard_all(student, "shard_mlp", args)
    for i, ((width, hid, rank, p), (w1, b1, w2, *_), got) in enumerate(zip(cases, args, results), 1):
        call = (f"{_label(hidden, i, len(cases))}: shard_mlp(w1 of shape {shown((width, hid))}, b1, w2, "
                f"rank={shown(rank)}, world_size={shown(p)})")
        part = hid // p
        mine = slice(rank * part, (rank + 1) * part)
        rows = slice(rank * (width // p), (rank + 1) * (width // p))
        hints = {"w1_shard": [(w1[rows, :], "these are rows of w1; split w1 by columns (each rank then holds whole "
                                             "columns of the hidden activation, and GeLU needs no communication)")],
                 "w2_shard": [(w2[:, mine], "these are columns of w2; split w2 by rows, the same slice as w1's "
                                             "columns")]}
        _check_shards(call, got, (w1[:, mine], b1[mine], w2[mine, :]), ("w1_shard", "b1_shard", "w2_shard"), hints)
    for (width, hid, rank, p, argument), got in zip(refused, results[len(cases):]):
        call = (f"shard_mlp(w1 of {shown(hid)} columns, ..., world_size={shown(p)})" if argument == "w1" else
                f"shard_mlp(..., rank={shown(rank)}, world_size={shown(p)})")
        _check_refused(got, argument, p, call)


@check(points=1)
def shard_attention(student, rng, hidden):
    """shard_attention gives each rank whole, consecutive heads; heads that do not split raise ValueError."""
    cases = [(4, 2, 1, 2), (8, 1, 2, 4)]  # (n_heads, head_size, rank, world_size)
    if hidden:
        for _ in range(3):
            p = int(rng.choice([2, 4]))
            cases.append((p * int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(0, p)), p))
    refused = [(6, 4)] + ([(3, 2), (4, 8)] if hidden else [])  # (n_heads, world_size)
    args = []
    for heads, size, rank, p in cases:
        width = heads * size
        args.append((*(_distinct(width, width) + 1000 * k for k in range(4)), heads, rank, p))
    for heads, p in refused:
        args.append((*[_distinct(heads * 2, heads * 2)] * 4, heads, 0, p))
    results = _shard_all(student, "shard_attention", args)
    for i, ((heads, size, rank, p), (wq, wk, wv, wo, *_), got) in enumerate(zip(cases, args, results), 1):
        call = f"{_label(hidden, i, len(cases))}: shard_attention(C={shown(heads * size)}, n_heads={shown(heads)}, " \
               f"rank={shown(rank)}, world_size={shown(p)})"
        part = heads // p * size
        mine = slice(rank * part, (rank + 1) * part)
        strided = np.concatenate([np.arange(h * size, (h + 1) * size) for h in range(rank, heads, p)])
        hint = ("these are heads rank, rank + p, rank + 2p, ...; take n_heads / world_size consecutive heads, rank 0 "
                "first")
        hints = {label: [(w[:, strided], hint)] for label, w in (("wq_shard", wq), ("wk_shard", wk),
                                                                  ("wv_shard", wv))}
        hints["wo_shard"] = [(wo[strided, :], hint), (wo[:, mine], "these are columns of wo; its rows match the "
                                                                   "heads' columns")]
        _check_shards(call, got, (wq[:, mine], wk[:, mine], wv[:, mine], wo[mine, :]),
                      ("wq_shard", "wk_shard", "wv_shard", "wo_shard"), hints)
    for (heads, p), got in zip(refused, results[len(cases):]):
        _check_refused(got, "n_heads", p, f"shard_attention(n_heads={shown(heads)}, world_size={shown(p)})")


# ---------------------------------------------------------------------------------------------- f and g


@check(points=2)
def f_and_g(student, rng, hidden):
    """f is the identity forward and sums the gradient backward; g sums forward and passes the gradient through;
    one all_reduce each, in the right pass."""
    p, shapes = 3, [[2, 3]] + ([[int(rng.integers(1, 5)), int(rng.integers(1, 9))], [1]] if hidden else [])
    seeds = [int(rng.integers(1, 2**31)) if hidden else 7 for _ in shapes]
    for name in ("copy_to_tensor_parallel", "reduce_from_tensor_parallel"):
        cases = [[(seed, name, shape) for _ in range(p)] for seed, shape in zip(seeds, shapes)]
        outcomes = student.call_ranks(name, cases, world_size=p, harness=f"{HARNESS}.region")
        for i, (seed, shape) in enumerate(zip(seeds, shapes)):
            inputs = [harness.region_inputs(seed, r, shape) for r in range(p)]
            total_x, total_g = sum(x for x, _ in inputs), sum(g for _, g in inputs)
            for rank, outcome in enumerate(outcomes[i]):
                what = f"{_label(hidden, i + 1, len(shapes))}: {name}(x of shape {shown(tuple(shape))}) on rank " \
                       f"{rank} of {p}"
                _error(outcome, what)
                value = outcome["value"]
                own_x, own_g = inputs[rank]
                if name == "copy_to_tensor_parallel":
                    _compare(f"{what}: its output", value["y"], own_x,
                             [(total_x, "f is the identity forward: the sum belongs in its backward")])
                    _compare(f"{what}: the gradient of x", value["grads"]["x"], total_g,
                             [(own_g, "the gradient was not summed over the ranks: f's backward is an all-reduce "
                                      "(register a hook that all-reduces it)")])
                    _check_collectives(what, value, int(np.prod(shape)), p, forward=0, backward=1)
                else:
                    _compare(f"{what}: its output", value["y"], total_x,
                             [(own_x, "g's forward is the all-reduce: its output is the sum over the ranks")])
                    _compare(f"{what}: the gradient of x", value["grads"]["x"], own_g,
                             [(total_g, "g's backward is the identity: the output's gradient is already the same on "
                                        "every rank, and summing it multiplies it by p")])
                    _check_collectives(what, value, int(np.prod(shape)), p, forward=1, backward=0)


# ---------------------------------------------------------------------------------------------- the MLP


def _mlp_cases(rng, hidden: bool, p: int) -> list[tuple]:
    cases = list(MLP_SIZES)
    if hidden:
        for shape in ([int(rng.integers(1, 7)), None], [2, int(rng.integers(1, 4)), None], [1, None]):
            width = int(rng.integers(3, 12))
            shape[-1] = width
            cases.append((int(rng.integers(1, 2**31)), shape, width, 4 * int(rng.integers(1, 5))))
    return cases


def _mlp_expected(seed: int, shape, width: int, hidden: int, p: int) -> dict:
    """The unsharded MLP's output and gradients (float64, the reference), and what known mistakes give instead."""
    whole = harness.mlp_inputs(seed, shape, width, hidden)
    leaves = {k: whole[k].clone().requires_grad_() for k in ("x", "w1", "b1", "w2", "b2")}
    y = reference.mlp(*leaves.values())
    y.backward(whole["gy"])
    grads = {k: v.grad for k, v in leaves.items()}
    partial_dx = []
    for rank in range(p):  # rank's own share of x's gradient: what a backward without f's all-reduce leaves
        mine = harness.columns(hidden, rank, p)
        x = whole["x"].clone().requires_grad_()
        (torch.nn.functional.gelu(x @ whole["w1"][:, mine] + whole["b1"][mine]) @ whole["w2"][mine, :]).backward(
            whole["gy"])
        partial_dx.append(x.grad)
    return {"y": y.detach(), "grads": grads, "b2": whole["b2"], "partial_dx": partial_dx}


def _run_mlp(student, rng, hidden: bool, p: int, backend: str = "gloo"):
    cases = _mlp_cases(rng, hidden, p)
    outcomes = student.call_ranks("tp_mlp", [[(seed, shape, width, hid) for _ in range(p)]
                                             for seed, shape, width, hid in cases],
                                  world_size=p, backend=backend, harness=f"{HARNESS}.mlp", timeout=20,
                                  wall_timeout=60)
    for i, (seed, shape, width, hid) in enumerate(cases):
        expected = _mlp_expected(seed, shape, width, hid, p)
        for rank, outcome in enumerate(outcomes[i]):
            what = f"{_label(hidden, i + 1, len(cases))}: tp_mlp(x of shape {shown(tuple(shape))}, F = {shown(hid)}) " \
                   f"on rank {rank} of {p}" + (" (NCCL)" if backend == "nccl" else "")
            yield what, outcome, expected, rank, hid, int(np.prod(shape))


def _mlp_forward(what, outcome, expected, p) -> None:
    value = outcome.get("value") or {}
    if outcome.get("error") or value.get("forward_error"):
        _error(outcome, what)
    hints = [(expected["y"] + (p - 1) * expected["b2"], "b2 was added on every rank before the sum, so the output "
                                                         "holds it p times: add it once, after g")]
    _compare(f"{what}: the output", value.get("y"), expected["y"], hints)


def _mlp_backward(what, outcome, expected, rank, hid, p) -> None:
    _error(outcome, what)
    grads, full = outcome["value"]["grads"], expected["grads"]
    mine = harness.columns(hid, rank, p)
    twice = "the gradient was summed over the ranks again (g's backward is the identity, not an all-reduce)"
    _compare(f"{what}: the gradient of x", grads.get("x"), full["x"],
             [(expected["partial_dx"][rank], "this is only this rank's share of the input's gradient: f's backward "
                                             "must sum it over the ranks"), (p * full["x"], twice)])
    for name, want in (("w1", full["w1"][:, mine]), ("b1", full["b1"][mine]), ("w2", full["w2"][mine, :])):
        _compare(f"{what}: the gradient of its {name} shard", grads.get(name), want, [(p * want, twice)])
    _compare(f"{what}: the gradient of b2", grads.get("b2"), full["b2"],
             [(full["b2"] / p, "b2 was split over the ranks before the sum (b2 / p on each): the output is right, "
                               "but b2's gradient is 1/p of the true one on every rank; add b2 once, after g"),
              (p * full["b2"], twice)])


@check(points=2)
def tp_mlp_forward(student, rng, hidden):
    """tp_mlp's output equals the unsharded MLP on 1, 2 and 4 ranks, on every rank."""
    for p in (1, 2, 4):
        for what, outcome, expected, *_ in _run_mlp(student, rng, hidden, p):
            _mlp_forward(what, outcome, expected, p)


@check(points=2)
def tp_mlp_backward(student, rng, hidden):
    """Backward from a random upstream gradient: x's gradient, each rank's shard gradients and b2's equal the
    unsharded MLP's, on 2 ranks (visible) and 4 (hidden)."""
    for p in ((4,) if hidden else (2,)):
        for what, outcome, expected, rank, hid, _ in _run_mlp(student, rng, hidden, p):
            _mlp_backward(what, outcome, expected, rank, hid, p)


@check(points=2)
def tp_mlp_collectives(student, rng, hidden):
    """Exactly one all_reduce of the activation's size forward and one backward, on 2 ranks (visible) and 4
    (hidden)."""
    p = 4 if hidden else 2
    for what, outcome, _, _, _, numel in _run_mlp(student, rng, hidden, p):
        _error(outcome, what)
        _check_collectives(what, outcome["value"], numel, p)


# ---------------------------------------------------------------------------------------------- attention


@check(points=3)
def tp_attention(student, rng, hidden):
    """tp_attention split by heads equals unsharded attention forward and backward on 2 ranks (visible) and 4
    (hidden), with one all_reduce of the activation's size per pass."""
    for p in ((4,) if hidden else (2,)):
        cases = list(ATTENTION_SIZES)
        if hidden:
            for causal in (False, True):
                cases.append((int(rng.integers(1, 2**31)), int(rng.integers(1, 3)), int(rng.integers(1, 6)),
                              None, 4 * int(rng.integers(1, 3)), causal))
            cases = [(s, b, t, c if c else heads * int(rng.integers(1, 4)), heads, causal)
                     for s, b, t, c, heads, causal in cases]
        outcomes = student.call_ranks("tp_attention", [[case for _ in range(p)] for case in cases], world_size=p,
                                      harness=f"{HARNESS}.attention", timeout=20, wall_timeout=60)
        for i, (seed, batch, tokens, width, heads, causal) in enumerate(cases):
            whole = harness.attention_inputs(seed, batch, tokens, width)
            names = ("x", "wq", "wk", "wv", "wo", "bo")
            leaves = {k: whole[k].clone().requires_grad_() for k in names}
            y = reference.attention(*leaves.values(), width // heads, causal)
            y.backward(whole["gy"])
            for rank, outcome in enumerate(outcomes[i]):
                what = (f"{_label(hidden, i + 1, len(cases))}: tp_attention(x of shape "
                        f"{shown((batch, tokens, width))}, n_heads = {shown(heads)}, causal={shown(causal)}) on rank "
                        f"{rank} of {p}")
                _error(outcome, what)
                value = outcome["value"]
                _compare(f"{what}: the output", value["y"], y.detach(),
                         [(y.detach() + (p - 1) * whole["bo"], "bo was added on every rank before the sum: add it "
                                                               "once, after g")])
                mine = harness.columns(width, rank, p)
                for name in names:
                    want = leaves[name].grad
                    want = want[:, mine] if name in ("wq", "wk", "wv") else want[mine, :] if name == "wo" else want
                    _compare(f"{what}: the gradient of {'its ' + name + ' shard' if name[0] == 'w' else name}",
                             value["grads"].get(name), want)
                _check_collectives(what, value, batch * tokens * width, p)


# ---------------------------------------------------------------------------------------------- on GPUs


@check(points=1)
def tp_mlp_nccl(student, rng, hidden):
    """The MLP over NCCL on two GPUs: output, gradients and collectives as on gloo."""
    require_gpu(gpus=2, optional=True)  # the gloo checks grade the same code on a CPU: graded where the GPUs are
    p = 2
    for what, outcome, expected, rank, hid, numel in _run_mlp(student, rng, hidden, p, backend="nccl"):
        _mlp_forward(what, outcome, expected, p)
        _mlp_backward(what, outcome, expected, rank, hid, p)
        _check_collectives(what, outcome["value"], numel, p)
