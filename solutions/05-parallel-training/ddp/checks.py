"""Checks: DDP with gradient buckets and overlap, on real processes.

assign_buckets is pure (student.call). The rest runs under the trusted driver
aisys.parallel.harness.ddp.train on 2 to 4 gloo ranks (two GPUs over NCCL for the last check),
all cases of one world size in one call_ranks. Each rank trains the driver's tiny float64
model (an embedding tied to the output projection, a frozen layer, a parameter the forward never
uses) on its shard of each batch; the driver records each all-reduce as posted and its own mark
as each gradient is accumulated (its hook runs before the student's). The checks compare:
the final weights with single-process training on the whole batches; the all-reduces of each
step with the reference's buckets (one each, its bytes, in bucket order); the first all-reduce of
each step with the last gradient mark (overlap); and, with one rank held back before its
backward, the other ranks' backward time (a rank that waits in a hook waits for the late one).
"""

import numpy as np

from aisys.parallel import ddp
from aisys.parallel.harness import ddp as harness

from aisys_grader.checks import case_on_ranks, check, compare_cases, require_gpu
from aisys_grader.compare import CheckFailure, shown, unredacted

HARNESS = "aisys.parallel.harness.ddp.train"
LR = 0.5  # large enough that a gradient p times too large, or not averaged, moves the weights far
STEPS = 3
# float64 throughout: DDP's average of p shard means and one process's mean over the whole batch add the same
# numbers in another order, which changes a weight by a few ulps per step (~1e-16 relative, measured 2e-16 after
# 3 steps); 1e-9 is far above that and far below any real mistake (a missing division by p changes the weights by
# about lr·(p-1)·|grad|, ~1e-2 here).
ATOL = 1e-9
DELAY = 0.8  # seconds the late rank sleeps before its backward; a backward of this model takes milliseconds, and
# half of this leaves a starved rank on a loaded 2-core machine room for a few scheduler stalls before it fails


# ---------------------------------------------------------------------------------------------- cases


def _model(rng, hidden: bool) -> dict:
    if not hidden:
        return {"seed": 1, "vocab": 8, "dim": 6, "hidden": 8}
    return {"seed": int(rng.integers(0, 2**31)), "vocab": int(rng.integers(5, 12)), "dim": int(rng.integers(3, 8)),
            "hidden": int(rng.integers(4, 10))}


def _trainable_sizes(model: dict) -> list[int]:
    """Bytes of the distinct trainable parameters in registration order (embed, unused, w1, b1, w2, b2)."""
    params = harness.build_model(**model)
    return [p.numel() * p.element_size() for p in ddp.trainable(params)]


def _overlapping_cap(rng, model: dict, hidden: bool) -> int:
    """A cap whose first bucket holds neither the embedding nor the unused parameter (so that it fills during
    backward) and that makes two buckets or more."""
    sizes = _trainable_sizes(model)
    if not hidden:
        return 400
    most = sum(sizes[2:])  # w1, b1, w2, b2: the first bucket must close within these
    return int(rng.integers(sizes[-1] + 1, most + 1))


def _case(rng, p: int, model: dict, cap: int, per_rank: int = 3, steps: int = STEPS, delay: float = 0.0) -> dict:
    tokens = rng.integers(0, model["vocab"], (steps, p * per_rank))
    targets = rng.integers(0, model["vocab"], (steps, p * per_rank))
    return {"p": p, "model": model, "cap": cap, "tokens": tokens, "targets": targets, "delay": delay}


def _args(case: dict, rank: int) -> tuple:
    p, m = case["p"], case["model"]
    tokens = case["tokens"].reshape(case["tokens"].shape[0], p, -1)[:, rank].copy()
    targets = case["targets"].reshape(case["targets"].shape[0], p, -1)[:, rank].copy()
    return (tokens, targets, m["seed"], m["vocab"], m["dim"], m["hidden"], case["cap"], LR,
            1 if case["delay"] else -1, case["delay"])


def _label(case: dict, hidden: bool, i: int, n: int) -> str:
    m = case["model"]
    what = (f"{case['p']} ranks, {case['tokens'].shape[0]} steps, cap_bytes={shown(case['cap'])}, model "
            f"vocab={shown(m['vocab'])} dim={shown(m['dim'])} hidden={shown(m['hidden'])}")
    return f"{'hidden case' if hidden else 'case'} {i} of {n} ({what})"


def _run(student, cases: list[dict], hidden: bool, backend: str = "gloo") -> list[list[dict]]:
    """Each case's per-rank values, all cases of one world size in one call_ranks; CheckFailure for an error."""
    p = cases[0]["p"]
    try:
        outcomes = student.call_ranks("ddp_attach", [[_args(c, r) for r in range(p)] for c in cases], world_size=p,
                                      backend=backend, harness=HARNESS, timeout=10, wall_timeout=60)
    except CheckFailure as failure:
        raise CheckFailure(f"{'hidden cases' if hidden else 'cases'} on {p} ranks: {failure}") from None
    return [[o["value"] for o in case_on_ranks(outcomes, i, _label(case, hidden, i + 1, len(cases)))]
            for i, case in enumerate(cases)]


# ---------------------------------------------------------------------------------------------- judgements


def _weights(case: dict, ranks: list[dict], label: str) -> None:
    m = case["model"]
    expected = harness.train_single(m["seed"], m["vocab"], m["dim"], m["hidden"], case["tokens"], case["targets"],
                                    case["tokens"].shape[0], LR)
    names = [harness.NAMES[i] for i in harness.distinct(harness.build_model(**m))]
    for rank, value in enumerate(ranks):
        for name, got, want in zip(names, value["weights"], expected):
            error = float(np.max(np.abs(np.asarray(got) - want)))
            if error <= ATOL:
                continue
            hint = ""
            if name == "frozen":
                hint = ": a parameter with requires_grad=False must never change"
            elif name == "unused":
                hint = ": it gets no gradient; its average over ranks is zero and it must stay as it is"
            else:
                hint = (". Do you divide the sum by the world size (gloo has no average), copy each parameter's "
                        "own slice of the flat buffer back into its .grad, and reduce every bucket, including those "
                        "whose hooks never all fired (a parameter the forward never uses)?")
            raise CheckFailure(f"{label}: on rank {rank}, parameter {name!r} after the last step differs from "
                               f"training on the whole batch in one process by "
                               f"{unredacted(f'{error:.3g}', 'more than the tolerance')} (largest absolute "
                               f"difference; float64, tolerance {ATOL:g}){hint}")


def _expected_buckets(case: dict) -> list[int]:
    sizes = _trainable_sizes(case["model"])
    return [sum(sizes[i] for i in bucket) for bucket in ddp.assign_buckets(sizes, case["cap"])]


def _traffic(case: dict, ranks: list[dict], label: str) -> None:
    expected = _expected_buckets(case)
    for rank, value in enumerate(ranks):
        for step, timeline in enumerate(value["steps"]):
            posted = [e for e in timeline if e["kind"] not in ("grad", "backward_done", "finished")]
            others = sorted({e["kind"] for e in posted if e["kind"] != "all_reduce"})
            if others:
                raise CheckFailure(f"{label}: rank {rank}, step {step}: {', '.join(others)} posted; DDP needs only "
                                   "all_reduce, one per bucket")
            got = [e["nbytes"] for e in posted]
            if got == expected:
                continue
            if sorted(got) == sorted(expected):
                why = ("the right buckets, in another order: post them in bucket order, bucket 0 (the last "
                       "parameters, whose gradients are ready first) first, each only after the one before")
            elif len(got) > len(expected) and sum(got) == sum(expected):
                why = "the right bytes in more all-reduces: flatten each bucket into one buffer, one all-reduce each"
            elif sum(got) > sum(expected):
                why = ("more bytes than the trainable parameters hold: is a tied tensor (listed twice) reduced "
                       "twice, or a frozen one (requires_grad=False) put in a bucket?")
            elif sum(got) < sum(expected):
                why = ("fewer bytes than the trainable parameters hold: is a bucket left out, such as one whose "
                       "hooks never all fired because a parameter got no gradient?")
            else:
                why = ("the buckets differ from assign_buckets' over the distinct trainable parameters, walked "
                       "from the last to the first")
            raise CheckFailure(f"{label}: rank {rank}, step {step}: all-reduces of {shown(got)} bytes were posted; "
                               f"the buckets hold {shown(expected)} bytes: {why}")


def _overlap(case: dict, ranks: list[dict], label: str) -> None:
    for rank, value in enumerate(ranks):
        for step, timeline in enumerate(value["steps"]):
            kinds = [e["kind"] for e in timeline]
            grads = [i for i, kind in enumerate(kinds) if kind == "grad"]
            first = next((i for i, kind in enumerate(kinds) if kind == "all_reduce"), None)
            if first is None or not grads:
                raise CheckFailure(f"{label}: rank {rank}, step {step}: no all-reduce was posted")
            if first > grads[-1]:
                before = sum(kind == "grad" for kind in kinds[:first])
                raise CheckFailure(
                    f"{label}: rank {rank}, step {step}: the first all-reduce was posted after all {before} "
                    "gradients had been accumulated, so no communication overlaps backward. Post a bucket's "
                    "all-reduce from the hook that completes it (async_op=True), not after backward")


def _no_wait(case: dict, ranks: list[dict], label: str) -> None:
    for rank, value in enumerate(ranks):
        if rank == 1:
            continue
        took = max(value["backward_seconds"])
        if took >= DELAY / 2:
            raise CheckFailure(
                f"{label}: rank 1 started its backward{unredacted(f' {DELAY:g} s', '')} late, and rank {rank}'s "
                f"backward took {unredacted(f'{took:.2f} s', 'about as long')}: it waited for rank 1 inside "
                "backward. Post the all-reduce with async_op=True, keep the request, and wait for it only in "
                "ddp_finish, so that backward goes on while the bucket travels")


def _each(student, cases_by_p: dict, hidden: bool, judge, backend: str = "gloo") -> None:
    for cases in cases_by_p.values():
        for i, (case, ranks) in enumerate(zip(cases, _run(student, cases, hidden, backend))):
            judge(case, ranks, _label(case, hidden, i + 1, len(cases)))


# ---------------------------------------------------------------------------------------------- checks


def _sizes(rng, n: int) -> list[int]:
    return [int(8 * rng.integers(1, 200)) for _ in range(n)]


@check(points=2)
def assign_buckets(student, rng, hidden):
    """assign_buckets walks the parameters from the last to the first, closing a bucket once it reaches the cap."""
    cases = [{"sizes": [384, 48, 384, 64, 384, 48], "cap_bytes": 400}, {"sizes": [10, 20, 30], "cap_bytes": 25},
             {"sizes": [100, 4, 4], "cap_bytes": 6}]
    if hidden:
        cases = [{"sizes": [], "cap_bytes": 100}, {"sizes": [64], "cap_bytes": 1},
                 {"sizes": [4, 1000, 4, 4], "cap_bytes": 10},  # larger than the cap: it closes the bucket it joins
                 {"sizes": [40, 40, 40], "cap_bytes": 8},  # cap below every size: one parameter per bucket
                 {"sizes": [8, 8, 8, 8], "cap_bytes": 16},  # exactly at the cap: >= closes
                 {"sizes": [8, 8, 8], "cap_bytes": 10**9}]  # one bucket
        for n in (5, 17, 40):
            sizes = _sizes(rng, n)
            cases.append({"sizes": sizes, "cap_bytes": int(rng.integers(1, sum(sizes) + 1))})

    def hint(case, got, expected):
        if isinstance(got, list) and [sorted(b) for b in got] == [sorted(b) for b in expected]:
            return "each bucket lists its indices in the order they were added: from the last parameter backwards"
        flat = [i for b in got for i in b] if isinstance(got, list) and all(isinstance(b, list) for b in got) else []
        if flat and flat == sorted(flat) and len(flat) > 1:
            return ("these are in registration order; gradients become ready from the last parameter to the first, "
                    "so walk the indices in reverse")
        return "close a bucket as soon as its bytes reach the cap (>= cap_bytes), and keep a last, smaller one"

    compare_cases(student, "assign_buckets", cases, ddp.assign_buckets, returns="list", hidden=hidden, hint=hint)
    if not hidden:
        try:
            student.call("assign_buckets", [8], 0, returns="list")
        except CheckFailure as failure:
            if "ValueError" in str(failure) and "cap_bytes" in str(failure):
                return
            raise CheckFailure(f"assign_buckets([8], 0): expected a ValueError naming cap_bytes; {failure}") from None
        raise CheckFailure("assign_buckets([8], 0) returned; a cap of 0 bytes must raise ValueError naming cap_bytes")


@check(points=3)
def ddp_matches_single_process(student, rng, hidden):
    """After several SGD steps on 2 to 4 ranks, every rank's weights equal one process's on the whole batches."""
    if not hidden:
        model = _model(rng, False)
        _each(student, {2: [_case(rng, 2, model, 400)]}, hidden, _weights)
        return
    by_p = {}
    for p in (3, 4):  # two on the visible case
        model = _model(rng, True)
        sizes = _trainable_sizes(model)
        caps = [_overlapping_cap(rng, model, True), sum(sizes) if p == 3 else 1]  # one bucket; one per parameter
        by_p[p] = [_case(rng, p, model, cap) for cap in caps]
    _each(student, by_p, hidden, _weights)


@check(points=2)
def ddp_one_all_reduce_per_bucket(student, rng, hidden):
    """Each step posts one all-reduce per bucket, of the bucket's bytes, in bucket order; tied and frozen
    parameters count once and never."""
    model = _model(rng, hidden)
    p = 3 if hidden else 2
    cases = [_case(rng, p, model, _overlapping_cap(rng, model, hidden))]
    if hidden:
        cases.append(_case(rng, p, model, 1))
    _each(student, {p: cases}, hidden, _traffic)


@check(points=2)
def ddp_overlaps_backward(student, rng, hidden):
    """In every step, the first all-reduce is posted before the last gradient is accumulated."""
    model = _model(rng, hidden)
    p = 4 if hidden else 2
    _each(student, {p: [_case(rng, p, model, _overlapping_cap(rng, model, hidden))]}, hidden, _overlap)


@check(points=1)
def ddp_never_waits_in_backward(student, rng, hidden):
    """With rank 1 held back before its backward, no other rank's backward waits for it."""
    model = _model(rng, hidden)
    p = 3 if hidden else 2
    case = _case(rng, p, model, _overlapping_cap(rng, model, hidden), steps=1, delay=DELAY)
    _each(student, {p: [case]}, hidden, _no_wait)


@check(points=1)
def ddp_nccl(student, rng, hidden):
    """The same training over NCCL on two GPUs: weights, one all-reduce per bucket, and overlap."""
    require_gpu(gpus=2, optional=True)  # the gloo checks grade the same code on a CPU: graded where the GPUs are
    model = _model(rng, hidden)
    case = _case(rng, 2, model, _overlapping_cap(rng, model, hidden))

    def judge(case, ranks, label):
        _weights(case, ranks, label)
        _traffic(case, ranks, label)
        _overlap(case, ranks, label)

    _each(student, {2: [case]}, hidden, judge, backend="nccl")
