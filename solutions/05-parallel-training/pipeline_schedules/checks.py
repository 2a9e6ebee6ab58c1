"""Checks: pipeline schedules as data, their simulator, and a schedule run on real processes.

The schedules are compared with the reference operation by operation (the notebook states each one exactly),
and judged for what they teach: every stage's list valid, GPipe's bubble (p-1)/(m+p-1) for t_b = t_f and
t_b = 2 t_f, 1F1B holding at most p - s micro-batches on stage s, interleaving dividing the bubble by v. The
simulator is compared with the reference on given schedules (float64 times: within 1e-9 relative, the error
of a few hundred additions) and must refuse invalid and deadlocked ones. On ranks (gloo, all cases of one world
size in one call) the harness builds each stage from a seed; the gradients must equal one process training on
the whole batch, the messages must go only between neighbours, one per boundary crossed, of one micro-batch's
activation each, and the activations held must follow the schedule.
"""

import numpy as np
import torch

from aisys.parallel import pipeline
from aisys.parallel.harness.pipeline import build

from aisys_grader.checks import case_on_ranks, check, require_gpu
from aisys_grader.compare import CheckFailure, raised, shown, unredacted

HARNESS = "aisys.parallel.harness.pipeline.run_stage"
REL = 1e-9  # simulated times are sums of a few hundred float64 durations: rounding stays far below 1e-12
GRAD_RTOL, GRAD_ATOL = 1e-9, 1e-12  # float64; micro-batch accumulation reorders sums of ~10 terms per element
# (error ~1e-15 relative), while one micro-batch lost or scaled wrong changes a gradient by > 1e-2 relative


def _args(args) -> str:
    """A call's arguments, in visible runs only: hidden cases' arguments are hidden data."""
    return unredacted(f"{tuple(args)}", "(the hidden case's arguments)")


def _ops(schedule) -> list:
    return [[list(op) for op in ops] for ops in schedule]


def _same_schedule(student, name: str, args: tuple, label: str) -> list:
    got = student.call(name, *args, returns="list")
    expected = _ops(getattr(pipeline, name)(*args))
    call = f"{label}: {name}{_args(args)}"
    if not (isinstance(got, list) and len(got) == len(expected)):
        raise CheckFailure(f"{call} should return one list per stage ({len(expected)})")
    for s, (mine, theirs) in enumerate(zip(got, expected)):
        mine = [list(op) if isinstance(op, list) else op for op in mine] if isinstance(mine, list) else mine
        if mine != theirs:
            first = next((j for j, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            raise CheckFailure(f"{call}: stage {s} differs from the schedule the notebook states, first at "
                               f"operation {first}: " + unredacted(f"got {shown(mine[first:first + 4])}..., "
                                                                   f"expected {theirs[first:first + 4]}...", ""))
    return got


def _bubble_is(schedule, want: float, call: str, t_b: float) -> None:
    got = pipeline.simulate(schedule, 1.0, t_b)["bubble"]
    if abs(got - want) > REL:
        raise CheckFailure(f"{call}: with t_b = {t_b:g} t_f its bubble is " + unredacted(f"{got:.6f}, not ", "not ")
                           + "(p-1)/(m+p-1)")


@check(points=1)
def gpipe(student, rng, hidden):
    """gpipe(p, m): all forwards then all backwards; bubble exactly (p-1)/(m+p-1) for t_b = t_f and 2 t_f."""
    cases = [(4, 8), (3, 2), (1, 3)] if not hidden else [(int(rng.integers(1, 7)), int(rng.integers(1, 12)))
                                                        for _ in range(5)] + [(5, 1)]
    for p, m in cases:
        got = _same_schedule(student, "gpipe", (p, m), "hidden case" if hidden else "case")
        for t_b in (1.0, 2.0):
            _bubble_is(got, (p - 1) / (m + p - 1), f"gpipe{_args((p, m))}", t_b)


@check(points=1)
def bubble_fraction(student, rng, hidden):
    """bubble_fraction(p, m, v) is (p - 1) / (v m + p - 1), the simulator's bubble for equal stages."""
    cases = [(4, 8, 1), (2, 1, 1), (4, 8, 2), (1, 5, 1)]
    if hidden:
        cases += [(int(rng.integers(1, 9)), int(rng.integers(1, 33)), int(rng.integers(1, 5))) for _ in range(6)]
    for p, m, v in cases:
        got = student.call("bubble_fraction", p, m, v, returns="number")
        want = pipeline.bubble_fraction(p, m, v)
        if abs(got - want) > 1e-12:  # one division of small integers: exact to rounding
            hint = " That is (p-1)/m, the idle time over the work, not over the makespan." \
                if abs(got - (p - 1) / (v * m)) < 1e-12 and p > 1 else ""
            raise CheckFailure(f"bubble_fraction{_args((p, m, v))} returned {shown(got)}, expected "
                               + unredacted(f"{want:.6f}", "another value") + ": idle "
                               f"(p-1) slots over the makespan of v·m + p - 1 slots.{hint}")


@check(points=2)
def simulate(student, rng, hidden):
    """simulate gives the reference's makespan, bubble, peaks and start times, and refuses invalid schedules and
    deadlocks with ValueError naming the stage."""
    cases = [(pipeline.gpipe(3, 4), 1.0, 2.0, 0.0), (pipeline.one_f_one_b(4, 6), 1.0, 2.0, 0.25),
             (pipeline.interleaved(2, 4, 2), 1.0, 1.0, 0.5),
             ([[("F", 1, 0), ("F", 0, 0), ("B", 1, 0), ("B", 0, 0)],
               [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)]], 1.0, 3.0, 0.0)]  # idle mid-run, not at start
    if hidden:
        p, m = int(rng.integers(2, 6)), int(rng.integers(1, 9))
        cases += [(pipeline.one_f_one_b(p, m), float(rng.uniform(0.5, 2)), float(rng.uniform(0.5, 3)),
                   float(rng.uniform(0, 0.5))),
                  (pipeline.gpipe(p, m), 1.0, 1.0, float(rng.uniform(0, 1))),
                  (pipeline.interleaved(p, p * 2, 3), 1.0, 2.0, 0.1)]
    for n, (schedule, t_f, t_b, t_c) in enumerate(cases, 1):
        got = student.call("simulate", _ops(schedule), t_f, t_b, t_c, returns="mapping")
        want = pipeline.simulate(schedule, t_f, t_b, t_c)
        call = f"{'hidden case' if hidden else 'case'} {n}: simulate" + unredacted(
            f"(schedule of {len(schedule)} stages, {t_f:.3g}, {t_b:.3g}, {t_c:.3g})", "(the hidden case)")
        for key in ("makespan", "bubble"):
            value = got.get(key)
            if not isinstance(value, (int, float)) or abs(value - want[key]) > REL * max(1.0, abs(want[key])):
                hint = (" Idle time is every gap on every stage, between operations too, not only before its "
                        "first" if key == "bubble" else "")
                raise CheckFailure(f"{call}: {key} is {shown(value)}, expected "
                                   + unredacted(f"{want[key]:.6g}", "another value") + f".{hint}")
        if got.get("peak") != want["peak"]:
            raise CheckFailure(f"{call}: peak is {shown(got.get('peak'))}, expected "
                               + unredacted(f"{want['peak']}", "another") + " (micro-batch "
                               "chunks forwarded and not yet backwarded, per stage)")
        starts = got.get("start")
        if not (isinstance(starts, list) and len(starts) == len(want["start"]) and all(
                isinstance(a, list) and len(a) == len(b) and
                all(isinstance(x, (int, float)) and abs(x - y) <= REL * max(1.0, y) for x, y in zip(a, b))
                for a, b in zip(starts, want["start"]))):
            raise CheckFailure(f"{call}: the start times differ from the reference's")
    refused = [
        ("B before its forward", [[("B", 0, 0), ("F", 0, 0)], [("F", 0, 0), ("B", 0, 0)]], 0, False),
        ("an operation missing", [[("F", 0, 0), ("B", 0, 0)], [("F", 0, 0)]], 1, False),
        ("an operation twice", [[("F", 0, 0), ("F", 0, 0), ("B", 0, 0)], [("F", 0, 0), ("B", 0, 0)]], 0, False),
        ("a deadlock", [[("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)],
                        [("F", 1, 0), ("F", 0, 0), ("B", 0, 0), ("B", 1, 0)]], 1, True)]
    for what, schedule, stage, deadlock in refused:
        got = student.call("refusal", "simulate", _ops(schedule), 1.0, 1.0, 0.0, returns="any")
        call = f"simulate on a schedule with {what}"
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError")
        if got[0] != "ValueError":
            raise CheckFailure(f"{call} raised {raised(got[1])}, not ValueError")
        if f"stage {stage}" not in got[1] or (deadlock and "deadlock" not in got[1].lower()):
            need = "'deadlock' and " if deadlock else ""
            raise CheckFailure(f"{call} raised ValueError, but its message should contain {need}'stage {stage}'"
                               + unredacted(f"; it says {got[1]!r}"))


@check(points=2)
def one_f_one_b(student, rng, hidden):
    """one_f_one_b(p, m): warm-up p - s - 1, steady 1F1B, cool-down; at most p - s micro-batches on stage s; the
    same bubble as GPipe; m < p handled."""
    cases = [(4, 8), (4, 2), (2, 5)] if not hidden else [(int(rng.integers(1, 7)), int(rng.integers(1, 12)))
                                                        for _ in range(5)] + [(6, 3)]
    for p, m in cases:
        got = _same_schedule(student, "one_f_one_b", (p, m), "hidden case" if hidden else "case")
        peaks = pipeline.simulate(got, 1.0, 1.0)["peak"]
        for s, peak in enumerate(peaks):
            if peak > min(p - s, m):
                raise CheckFailure(f"one_f_one_b{_args((p, m))}: stage {s} holds " + unredacted(
                    f"{peak} micro-batches, more than min(p - s, m) = {min(p - s, m)}",
                    "more micro-batches than min(p - s, m)"))
        for t_b in (1.0, 2.0):
            _bubble_is(got, (p - 1) / (m + p - 1), f"one_f_one_b{_args((p, m))}", t_b)


@check(points=2)
def interleaved(student, rng, hidden):
    """interleaved(p, m, v): Megatron's schedule; bubble (p-1)/(v m + p - 1); m not a multiple of p refused."""
    cases = [(4, 8, 2), (2, 4, 3), (3, 3, 2)]
    if hidden:
        cases += [(p := int(rng.integers(2, 6)), p * int(rng.integers(1, 4)), int(rng.integers(1, 4)))
                  for _ in range(4)]
    for p, m, v in cases:
        got = _same_schedule(student, "interleaved", (p, m, v), "hidden case" if hidden else "case")
        want = (p - 1) / (v * m + p - 1)
        bubble = pipeline.simulate(got, 1.0, 2.0)["bubble"]
        if abs(bubble - want) > REL:
            raise CheckFailure(f"interleaved{_args((p, m, v))}: its bubble is not (p-1)/(vm+p-1)"
                               + unredacted(f": {bubble:.6f} against {want:.6f}"))
    for p, m, v in [(4, 6, 2), (3, 4, 2)]:
        got = student.call("refusal", "interleaved", p, m, v, returns="any")
        if not (isinstance(got, list) and got[0] == "ValueError" and "m" in str(got[1]).replace("(", " ").split()
                or isinstance(got, list) and got[0] == "ValueError" and "m=" in str(got[1])):
            raise CheckFailure(f"interleaved{(p, m, v)} should raise ValueError naming m (m must be a multiple of "
                               f"p)" + unredacted(f"; got {shown(got)}"))


def _expected_grads(seed: int, layers: int, m: int, rows: int, width: int):
    model = build(seed, layers, m, rows, width)
    weights = model["weights"].clone().requires_grad_()
    biases = model["biases"].clone().requires_grad_()
    x = model["inputs"].reshape(-1, width)
    for k in range(layers):
        x = torch.tanh(x @ weights[k].T + biases[k])
    (0.5 * ((x - model["targets"].reshape(-1, width)) ** 2).sum() / (m * rows)).backward()
    return weights.grad.numpy(), biases.grad.numpy()


def _expected_messages(ops, rank: int, p: int, v: int) -> dict:
    """(kind, peer) -> count, for this rank's operations."""
    counts = {}
    last = p * v - 1
    for kind, _, c in ops:
        k = c * p + rank
        if kind == "F":
            pairs = ([("recv", (rank - 1) % p)] if k > 0 else []) + ([("send", (rank + 1) % p)] if k < last else [])
        else:
            pairs = ([("recv", (rank + 1) % p)] if k < last else []) + ([("send", (rank - 1) % p)] if k > 0 else [])
        for pair in pairs:
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def _explain(rank: int, error: str) -> str:
    """A rank's error, and what a timeout usually means in a pipeline."""
    hint = ""
    if "timed out" in error.lower() or "timeout" in error.lower():
        hint = (": a receive waited for a message nobody sent yet. With a blocking dist.send, stage s "
                "waits for s + 1 to receive its activation while s + 1 waits in its own send of a "
                "gradient to s: post sends with dist.isend and wait for them at the end")
    return f"rank {rank} raised {raised(error)}{hint}"


def _run(student, p: int, cases: list, rng, label: str, backend: str = "gloo") -> None:
    """cases: (name, schedule, m, v); all in one call_ranks."""
    rows, width = 2, int(rng.integers(3, 7))
    seeds = [int(rng.integers(0, 2**31)) for _ in cases]
    args = [[(_ops(schedule)[r], seed, v, m, rows, width) for r in range(p)]
            for (_, schedule, m, v), seed in zip(cases, seeds)]
    try:
        outcomes = student.call_ranks("run_pipeline", args, world_size=p, backend=backend, timeout=3,
                                      wall_timeout=60, harness=HARNESS)
    except CheckFailure as failure:
        raise CheckFailure(f"{label}, {p} ranks: {failure}") from None
    for n, ((name, schedule, m, v), seed) in enumerate(zip(cases, seeds)):
        where = f"{label}, {p} ranks, {name}" + unredacted(f" with m={m}" + (f", v={v}" if v > 1 else ""))
        ranks = case_on_ranks(outcomes, n, where, _explain)
        grads_w, grads_b = _expected_grads(seed, p * v, m, rows, width)
        peaks = pipeline.simulate(schedule, 1.0, 1.0)["peak"]
        for r, outcome in enumerate(ranks):
            value = outcome["value"]
            if value["collectives"]:
                raise CheckFailure(f"{where}: rank {r} called {shown(value['collectives'][:3])}: a pipeline moves "
                                   "activations and gradients with point-to-point messages only")
            timeline = value["timeline"]
            sent = {}
            for e in timeline:
                if e["kind"] in ("send", "recv"):
                    if e["numel"] != rows * width or e["dtype"] != "float64":
                        raise CheckFailure(f"{where}: rank {r} posted a {e['kind']} of {e['numel']} {e['dtype']} "
                                           f"elements; each message is one micro-batch's activation or gradient, "
                                           f"{rows}x{width} float64")
                    sent[(e["kind"], e["peer"])] = sent.get((e["kind"], e["peer"]), 0) + 1
            want = _expected_messages(schedule[r], r, p, v)
            if sent != want:
                raise CheckFailure(f"{where}: rank {r} posted {sorted(sent.items())} messages by (kind, peer); the "
                                   f"schedule needs {sorted(want.items())}: one per micro-batch and boundary, to "
                                   "the neighbours only")
            order = [(e["kind"], e["chunk"]) for e in timeline if e["kind"] in ("forward", "backward")]
            want_order = [("forward" if kind == "F" else "backward", c) for kind, _, c in schedule[r]]
            if order != want_order:
                raise CheckFailure(f"{where}: rank {r} ran its forwards and backwards in another order than its "
                                   "list; the schedule is what bounds the activations held")
            held = peak = 0
            for kind, _ in order:
                held += 1 if kind == "forward" else -1
                peak = max(peak, held)
            if peak != peaks[r]:
                raise CheckFailure(f"{where}: rank {r} held {peak} activations at once; its schedule holds "
                                   f"{peaks[r]}")
            if value["missing"]:
                raise CheckFailure(f"{where}: rank {r}'s chunks {value['missing']} got no gradient")
            for c in range(v):
                k = c * p + r
                for got, expected, what in ((value["weight_grads"][c], grads_w[k], "weight"),
                                            (value["bias_grads"][c], grads_b[k], "bias")):
                    if not np.allclose(got, expected, rtol=GRAD_RTOL, atol=GRAD_ATOL):
                        ratio = float(np.sum(got * expected) / max(np.sum(expected * expected), 1e-300))
                        hint = (f" They are {ratio:.3g} times the right ones: the loss of a micro-batch is its sum "
                                "over the WHOLE batch's rows (divide by `batch`), so that the m micro-batches add "
                                "up to the batch's mean" if abs(ratio - 1) > 0.01 and abs(ratio - round(ratio)) < 0.01
                                else "")
                        raise CheckFailure(f"{where}: rank {r}, chunk {c} (layer {k}): the {what} gradient differs "
                                           f"from one process training on the whole batch.{hint}")


def _cases(rng, p: int, hidden: bool) -> list:
    """Visible: 3 ranks, m < p, 1F1B's steady state, interleaved with m == p; hidden: 2 ranks, random m."""
    if not hidden:
        return [("GPipe", pipeline.gpipe(3, 2), 2, 1), ("1F1B", pipeline.one_f_one_b(3, 5), 5, 1),
                ("interleaved", pipeline.interleaved(3, 3, 2), 3, 2)]
    m = int(rng.integers(1, 7))
    return [("1F1B", pipeline.one_f_one_b(p, m), m, 1), ("GPipe", pipeline.gpipe(p, m), m, 1),
            ("interleaved", pipeline.interleaved(p, 2 * p, 2), 2 * p, 2)]


@check(points=3)
def run_pipeline(student, rng, hidden):
    """run_pipeline on real processes: gradients of one-process training, neighbour messages only, one per
    boundary crossed, and the activations held as the schedule says."""
    label = "hidden case" if hidden else "case"
    for p in (2 if hidden else 3,):  # 2 ranks exchange activations and gradients both ways (interleaved)
        _run(student, p, _cases(rng, p, hidden), rng, label)


@check(points=1)
def run_pipeline_nccl(student, rng, hidden):
    """run_pipeline gives the same gradients and messages over NCCL, on two GPUs."""
    require_gpu(gpus=2, optional=True)  # the gloo checks grade the same code on a CPU: graded where the GPUs are
    m = int(rng.integers(2, 6)) if hidden else 4
    _run(student, 2, [("1F1B", pipeline.one_f_one_b(2, m), m, 1), ("GPipe", pipeline.gpipe(2, m), m, 1)], rng,
         "hidden case" if hidden else "case", backend="nccl")
