"""Checks: ZeRO stages 1, 2 and 3 with AdamW, trained on real processes.

A trusted training loop (aisys.parallel.harness.zero.train) runs on every rank around the
student's init_state, gather_parameters, reduce_gradients and adamw_step: a two-layer float64
model, each rank on its rows of the batch, three steps. The grader computes, in this process,
what unsharded torch.optim.AdamW gives on the whole batch, and compares every rank's
parameters, the shards put together (padding included) and the first step's reduced gradient
shard; reads the size of every tensor in the state at each point of a step and the gradient
elements held after the reduction; and checks each step's collectives, their kinds, order
and sizes, against ZeRO's 2Ψ (stages 1-2) and 3Ψ (stage 3). All stages of one world size run
in one call_ranks.
"""

import math

import numpy as np
import torch

from aisys.parallel import zero
from aisys.parallel.harness import zero as harness

from aisys_grader.checks import case_on_ranks, check, require_gpu
from aisys_grader.compare import CheckFailure, describe, shown, unredacted

HARNESS = "aisys.parallel.harness.zero.train"
DIMS, ROWS, STEPS = [7, 5, 3], 12, 3  # 58 parameters in four tensors of uneven sizes; 12 rows split on 2, 3, 4 ranks
HYPER = {  # per stage: eps = 1e-3 in stage 2 makes a gradient that is summed, not averaged, change the weights
    1: {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1},
    2: {"lr": 0.02, "beta1": 0.8, "beta2": 0.99, "eps": 1e-3, "weight_decay": 0.05},
    3: {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1},
}
# float64 carries 16 digits. The sharded run sums the same local gradients in another order (a relative
# difference of about p·1e-16), and three AdamW steps, each moving a parameter by at most lr/(1 - β1) times a
# ratio m/(√v + ε) that is smooth in the gradient, amplify it by far less than 10^4: 1e-10 is well above what
# rounding does here and 10^5 times below the smallest difference a wrong step makes (bias correction, L2 decay, a
# sum for a mean: 1e-4 and more after one step).
ATOL, RTOL = 1e-10, 1e-9
GATHER, SCATTER = "all-gather", "reduce-scatter"
KINDS = {"all_gather_into_tensor": GATHER, "all_gather": GATHER, "reduce_scatter_tensor": SCATTER,
         "reduce_scatter": SCATTER}


# ---------------------------------------------------------------------------------------------- cases


def _cases(rng, hidden: bool, stages=(1, 2, 3)) -> list[tuple]:
    """(stage, seed, dims, rows, steps, hyper) per case: the visible model of 58 parameters, or random widths."""
    if not hidden:
        return [(stage, 10 + stage, DIMS, ROWS, STEPS, HYPER[stage]) for stage in stages]
    cases = []
    for stage in stages:
        dims = [int(rng.integers(2, 10)), int(rng.integers(1, 8)), int(rng.integers(1, 5))]
        hyper = {"lr": float(rng.uniform(0.005, 0.1)), "beta1": float(rng.uniform(0.8, 0.95)),
                 "beta2": float(rng.uniform(0.99, 0.9999)), "eps": float(10.0 ** rng.uniform(-8, -3)),
                 "weight_decay": float(rng.uniform(0, 0.2))}
        cases.append((stage, int(rng.integers(0, 2**31)), dims, ROWS, STEPS, hyper))
    return cases


def _adamw(seed: int, dims, rows: int, steps: int, hyper: dict, mistake: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Unsharded training on the whole batch: the final flat parameters and the first step's flat gradient.
    torch.optim.AdamW, or (for naming a wrong result) Adam with L2 decay, or AdamW without bias correction."""
    weights = [t.clone().requires_grad_() for t in harness.parameters(seed, dims)]
    x, y = harness.batch(seed, dims, rows)
    betas = (hyper["beta1"], hyper["beta2"])
    if mistake == "l2":
        optimizer = torch.optim.Adam(weights, hyper["lr"], betas, hyper["eps"], hyper["weight_decay"], foreach=False)
    else:
        optimizer = torch.optim.AdamW(weights, hyper["lr"], betas, hyper["eps"], hyper["weight_decay"], foreach=False)
    first = None
    for step in range(steps):
        optimizer.zero_grad()
        harness.loss(weights, x, y).backward()
        if first is None:
            first = torch.cat([w.grad.reshape(-1) for w in weights]).numpy().copy()
        if mistake == "no_bias_correction":
            with torch.no_grad():
                for w in weights:
                    state = optimizer.state.setdefault(w, {})
                    m = state.setdefault("m", torch.zeros_like(w))
                    v = state.setdefault("v", torch.zeros_like(w))
                    w.mul_(1 - hyper["lr"] * hyper["weight_decay"])
                    m.lerp_(w.grad, 1 - betas[0])
                    v.mul_(betas[1]).addcmul_(w.grad, w.grad, value=1 - betas[1])
                    w.addcdiv_(m, v.sqrt().add_(hyper["eps"]), value=-hyper["lr"])
        else:
            optimizer.step()
    return torch.cat([w.detach().reshape(-1) for w in weights]).numpy(), first


def _padded(flat: np.ndarray, p: int) -> np.ndarray:
    size = zero.shard_size(flat.size, p)
    return np.concatenate([flat, np.zeros(size * p - flat.size)])


# ---------------------------------------------------------------------------------------------- running


def _run(student, p: int, cases: list[tuple], label: str, backend: str = "gloo") -> list[list[dict]]:
    """Every case on p ranks in one call_ranks; each rank's value, or CheckFailure naming the first cause."""
    try:
        outcomes = student.call_ranks("adamw_step", [[case] * p for case in cases], world_size=p, backend=backend,
                                      timeout=20, wall_timeout=90, harness=HARNESS)
    except CheckFailure as failure:
        raise CheckFailure(f"{label}, {p} ranks: {failure}") from None
    return [[o["value"] for o in case_on_ranks(outcomes, i, f"{label}, {p} ranks, stage {case[0]}")]
            for i, case in enumerate(cases)]


def _array(value, what: str, size: int, where: str) -> np.ndarray:
    if not isinstance(value, list) or len(value) != size:
        got = "nothing" if value is None else (f"{len(value)} elements" if isinstance(value, list) else "no tensor")
        raise CheckFailure(f"{where}: {what} should hold {size} elements (a shard), got {got}")
    return np.asarray(value, dtype=np.float64)


def _first_wrong(got: np.ndarray, expected: np.ndarray) -> int | None:
    bad = ~np.isclose(got, expected, rtol=RTOL, atol=ATOL)
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


# ---------------------------------------------------------------------------------------------- what is checked


def _check_training(case: tuple, ranks: list[dict], p: int, where: str) -> None:
    stage, seed, dims, rows, steps, hyper = case
    final, first_grad = _adamw(seed, dims, rows, steps, hyper)
    numel, size = final.size, zero.shard_size(final.size, p)
    grad, params = _padded(first_grad, p), _padded(final, p)
    for rank, value in enumerate(ranks):
        mine = slice(rank * size, (rank + 1) * size)
        got = _array(value.get("grad_shard"), 'state["grad"] after the first reduce_gradients', size,
                     f"{where}, rank {rank}")
        index = _first_wrong(got, grad[mine])
        if index is not None:
            hint = ""
            if np.allclose(got, p * grad[mine], rtol=RTOL, atol=ATOL):
                hint = (f": it is {p} times the whole batch's gradient, the sum over the ranks. Divide the "
                        "reduce-scatter's sum by p (gloo has no ReduceOp.AVG)")
            elif np.allclose(got, 0 * got):
                hint = ": it is all zeros"
            elif got[index] == 0:
                hint = (": it is zero, as padding is. Is the padding all at the end of the flat vector, every shard "
                        "ceil(numel / p) long and rank r's starting at r·s?")
            raise CheckFailure(f"{where}, rank {rank}: the first step's reduced gradient shard differs from the whole "
                               f"batch's gradient at element {rank * size + index} of the padded flat vector"
                               f"{unredacted(f' ({got[index]:.6g}, expected {grad[mine][index]:.6g})')}{hint}")
    shards = np.concatenate([_array(v.get("shard"), 'state["shard"]', size, f"{where}, rank {r}")
                             for r, v in enumerate(ranks)])
    index = _first_wrong(shards, params)
    if index is not None:
        raise CheckFailure(f"{where}: after {steps} steps the shards put together differ from unsharded "
                           f"torch.optim.AdamW on the whole batch at element {index} of the padded flat vector "
                           f"(rank {index // size}'s shard){_training_hint(case, shards, index, numel, p)}")
    if stage < 3:
        for rank, value in enumerate(ranks):
            got = value.get("params")
            if not isinstance(got, list) or len(got) != numel:
                raise CheckFailure(f'{where}, rank {rank}: state["params"] should hold the {numel} parameters in '
                                   "stages 1 and 2")
            index = _first_wrong(np.asarray(got, dtype=np.float64), final)
            if index is not None:
                raise CheckFailure(f'{where}, rank {rank}: state["params"] differs from unsharded AdamW at '
                                   f"parameter element {index}, though the shards are right: does adamw_step "
                                   "all-gather the updated shards and copy them into the parameters in place?")


def _training_hint(case: tuple, shards: np.ndarray, index: int, numel: int, p: int) -> str:
    """What a wrong result matches: the padding, Adam's L2 decay, no bias correction."""
    stage, seed, dims, rows, steps, hyper = case
    if index >= numel:
        return (": that element is padding, which must stay zero. Is the padding all at the end of the flat "
                "vector (shards of ceil(numel / p), rank r's at r·s)?")
    for mistake, what in (("l2", "Adam with L2 weight decay (the decay added to the gradient) rather than AdamW's "
                                 "decoupled decay, which multiplies the parameter by 1 - lr·weight_decay"),
                          ("no_bias_correction", "AdamW without bias correction: divide the step by 1 - β1^t and "
                                                 "√v by √(1 - β2^t), t counted from 1")):
        other = _padded(_adamw(seed, dims, rows, steps, hyper, mistake)[0], p)
        if _first_wrong(shards, other) is None:
            return f": the result is {what}"
    if np.any(shards[numel:] != 0):
        return ": the padding after the parameters is not zero, so it has moved into the parameters' places"
    return ""


POINTS = {"init": "after init_state", "forward": "after the forward pass of step", "reduced":
          "after reduce_gradients of step", "step": "after adamw_step of step"}


def _check_memory(case: tuple, ranks: list[dict], p: int, where: str) -> None:
    stage, seed, dims, rows, steps, hyper = case
    numel = sum(math.prod(shape) for shape in harness.shapes(dims))
    size = zero.shard_size(numel, p)
    full = {"params": numel} if stage < 3 else {}  # what a rank may hold whole, in elements
    for rank, value in enumerate(ranks):
        for point, held in (value.get("sizes") or {}).items():
            at = " ".join([POINTS[point.split()[0]], *point.split()[1:]])
            for key, count in held.items():
                if key in full and count == full[key] or key == "grad_buffer" and stage == 1 and count <= size * p:
                    continue
                if key in full:
                    raise CheckFailure(f'{where}, rank {rank}: state["params"] holds '
                                       f"{unredacted(f'{count} elements', 'another number of elements')} {at}; "
                                       f"stages 1 and 2 keep the {unredacted(f'{numel} ', '')}parameters whole")
                if count > size:
                    why = {1: "stage 1 keeps 1/p of the optimizer's state (and the parameters' shard) per rank",
                           2: "stage 2 keeps 1/p of the optimizer's state and of the reduced gradients per rank",
                           3: "stage 3 keeps only shards: the gathered parameters are dropped after each pass and "
                              "gathered again, and the gradients are kept as one shard"}[stage]
                    raise CheckFailure(f'{where}, rank {rank}: state["{shown(key)}"] holds '
                                       f"{unredacted(f'{count} elements', 'more elements')} {at}, more than one shard "
                                       f"{unredacted(f'({size} = ceil({numel} / {p}))', '(ceil(numel / p))')}: {why}")
            if point.startswith("step"):
                for key in ("shard", "exp_avg", "exp_avg_sq"):
                    if held.get(key) != size:
                        raise CheckFailure(f'{where}, rank {rank}: state["{key}"] should be a tensor of one shard, '
                                           f"{unredacted(f'{size} elements', 'ceil(numel / p) elements')}, {at}; it "
                                           f"holds {unredacted(str(held.get(key, 'no tensor')), 'something else')}")
        kept = value.get("kept_outside") or []
        if kept:
            raise CheckFailure(f"{where}, rank {rank}: between calls your code changed storage of its own outside the "
                               f"state ({unredacted(kept[0], 'a module-level value or a default argument')}): "
                               "what a rank holds is what its state holds, so the moments, "
                               "shards and gradients it keeps from one call to the next belong in the state dict, "
                               "not in a module-level value or a default argument")
        if stage >= 2:
            for step, held in enumerate(value.get("grad_held") or [], 1):
                if held > size:
                    raise CheckFailure(f"{where}, rank {rank}: after reduce_gradients of step {step} the state "
                                       f"holds {unredacted(f'{held} ', 'more ')}gradient elements than its shard "
                                       f"{unredacted(f'of {size} ', '')}: stage "
                                       f"{stage} keeps only the rank's shard of the reduced gradients")


def _check_communication(case: tuple, ranks: list[dict], p: int, where: str) -> None:
    stage, seed, dims, rows, steps, hyper = case
    numel = sum(math.prod(shape) for shape in harness.shapes(dims))
    formula = zero.communication_per_step(numel, p, stage)
    padded = zero.shard_size(numel, p) * p
    expected = [GATHER, "forward", GATHER, "backward", SCATTER, "reduced"] if stage == 3 else \
        ["forward", "backward", SCATTER, "reduced", GATHER]
    for rank, value in enumerate(ranks):
        for step, timeline in enumerate(value.get("steps") or [], 1):
            at = f"{where}, rank {rank}, step {step}"
            names = [entry.get("mark") or entry.get("name") for entry in timeline]
            for entry in timeline:
                name = entry.get("name")
                if name in ("send", "recv"):
                    raise CheckFailure(f"{at}: a point-to-point message ({name}); ZeRO's step uses collectives only")
                if name and name not in KINDS:
                    extra = (": an all-reduce moves 2Ψ for the gradients alone; a reduce-scatter gives each rank "
                             "the sum of its own shard for Ψ" if name == "all_reduce" else "")
                    raise CheckFailure(f"{at}: posted {name}, which a ZeRO step does not use (only a reduce-scatter "
                                       f"of the gradients and all-gathers of the parameters){extra}")
                if name and entry.get("numel") != padded:
                    raise CheckFailure(f"{at}: a {KINDS[name]} of {entry.get('numel')} elements; each collective "
                                       f"moves the padded flat vector, p·s = {padded} elements")
            got = [KINDS.get(n, n) for n in names]
            total = sum(entry.get("numel") or 0 for entry in timeline)
            if got != expected:
                hint = ""
                if stage == 3 and got.count(GATHER) < 2:
                    hint = (": stage 3 all-gathers the parameters before the forward pass and again before the "
                            "backward pass (the full parameters are freed in between)")
                raise CheckFailure(f"{at}: the step posted {', '.join(got)}; expected {', '.join(expected)} "
                                   f"(a total of {formula['total']} elements = {formula['total'] // padded}Ψ, "
                                   f"here {total}){hint}")
            if total != formula["total"]:
                raise CheckFailure(f"{at}: {total} elements in all; ZeRO stage {stage} moves {formula['total']}")


def _check_world(student, p: int, cases: list[tuple], label: str, checks, backend: str = "gloo") -> None:
    values = _run(student, p, cases, label, backend)
    for case, ranks in zip(cases, values):
        where = f"{label}, {p} ranks, stage {case[0]}" + (f", widths {describe(case[2])}" if label != "case" else "")
        for what in checks:
            what(case, ranks, p, where)


# ---------------------------------------------------------------------------------------------- checks


@check(points=1)
def shard_bounds(student, rng, hidden):
    """shard_bounds(numel, p): p shards of ceil(numel / p) elements, rank r's at r·s, clipped to numel."""
    cases = [(58, 4), (58, 2), (3, 4)]
    if hidden:
        cases = [(0, 3), (1, 1), (1, 4), (10, 5), (11, 5), (9, 4), (16, 4), (17, 4)]
        cases += [(int(rng.integers(0, 10**6)), int(rng.integers(1, 9))) for _ in range(5)]
    for i, (numel, p) in enumerate(cases, 1):
        got = student.call("shard_bounds", numel, p, returns="list")
        expected = [list(b) for b in zero.shard_bounds(numel, p)]
        if got != expected:
            label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}"
            hint = (" Every shard has s = ceil(numel / p) elements (the last one padded), not sizes that differ by "
                    "one: rank r's starts at r·s")
            raise CheckFailure(f"{label}: shard_bounds({shown(numel)}, {shown(p)}) returned "
                               f"{unredacted(str(got)[:200], 'other bounds')}, expected "
                               f"{unredacted(str(expected)[:200], 'the reference')}.{hint}")


@check(points=4)
def zero_training(student, rng, hidden):
    """Stages 1, 2 and 3 on 2, 3 and 4 ranks train exactly as unsharded torch.optim.AdamW on the whole batch."""
    if hidden:  # 4 ranks: the visible model (58 parameters: shards of 15, the last one padded), then random widths
        _check_world(student, 4, _cases(rng, False) + _cases(rng, True), "hidden case", [_check_training])
        return
    for p in (2, 3, 4):
        _check_world(student, p, _cases(rng, hidden), "case", [_check_training])


@check(points=2)
def zero_memory(student, rng, hidden):
    """Each rank's state holds one shard of AdamW's moments and parameters; stages 2-3 keep one shard of gradients."""
    _check_world(student, 3 if hidden else 4, _cases(rng, hidden), "hidden case" if hidden else "case",
                 [_check_memory])


@check(points=2)
def zero_communication(student, rng, hidden):
    """Each step posts a reduce-scatter and an all-gather (2Ψ) in stages 1-2, and two all-gathers (3Ψ) in stage 3."""
    _check_world(student, 4 if hidden else 3, _cases(rng, hidden), "hidden case" if hidden else "case",
                 [_check_communication])


@check(points=1)
def zero_nccl(student, rng, hidden):
    """The three stages over NCCL on two GPUs: the same parameters, state sizes and collectives."""
    require_gpu(gpus=2, optional=True)  # the gloo checks grade the same code on a CPU: graded where the GPUs are
    _check_world(student, 2, _cases(rng, hidden), "hidden case" if hidden else "case",
                 [_check_training, _check_memory, _check_communication], backend="nccl")
