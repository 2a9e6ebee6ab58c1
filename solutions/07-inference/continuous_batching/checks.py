"""Checks: static and continuous batching schedules, and their latency metrics.

The student's simulators take a trace (a list of request dicts), a KV block budget, a batch
limit and a linear step cost (a + b x new tokens), and return per request the time of its first
token, the time of its last and how often it was preempted. Under the notebook's rules the
schedule is unique, so each is compared with `aisys.inference.scheduler.simulate` on the same
input: preemption counts exactly, times within 1e-9 s (they are sums of the same step costs).

Hidden traces are drawn from the seed: arrivals on a grid of 0.25 s with dyadic step costs, so
that requests arrive exactly when a step ends (the boundary of "arrived by the end of the step")
and equal arrival times are common (ties broken by list order); long gaps that leave the engine
idle (the clock jumps to the next arrival); prompts and outputs of a single token; max_batch 1;
block sizes 1 to 16. Cases without preemption give every request its worst case in blocks;
cases with preemption give the largest request exactly what it needs, or a block or two more,
and are redrawn until the reference preempts at least once.
"""

import numpy as np

from aisys.inference import scheduler

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, unredacted

TIME_TOLERANCE = 1e-9  # seconds: both sides add up the same step costs
METRICS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "throughput")

VISIBLE_TRACE = [  # (id, arrival, prompt_len, output_len): the notebook's worked example
    (0, 0.0, 4, 3),
    (1, 0.0, 2, 2),
    (2, 1.5, 3, 2),
]
VISIBLE_PREEMPTION_TRACE = [(0, 0.0, 3, 4), (1, 0.0, 2, 3), (2, 5.0, 1, 1)]
VISIBLE_IDLE_TRACE = [(7, 0.0, 1, 1), (3, 10.0, 1, 2)]
# The list out of arrival order, ids out of list order, ties in arrival, one request at a time: the queue's order
# (by arrival, ties in the order of the list) decides every time; on every seed.
UNSORTED_TRACE = [(5, 1.0, 2, 2), (3, 0.0, 3, 1), (9, 0.0, 1, 3), (1, 1.0, 2, 1)]


def _requests(rows) -> list[dict]:
    return [{"id": i, "arrival": float(t), "prompt_len": p, "output_len": o} for i, t, p, o in rows]


def _case(rows, num_blocks, block_size, max_batch, step_time) -> dict:
    return {"requests": _requests(rows), "num_blocks": num_blocks, "block_size": block_size, "max_batch": max_batch,
            "step_time": [float(x) for x in step_time]}


def _schedule(policy: str, requests, num_blocks, block_size, max_batch, step_time) -> scheduler.Schedule:
    trace = [scheduler.Request(**r) for r in requests]
    return scheduler.simulate(trace, policy, num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                              step_time=scheduler.linear_step_time(*step_time))


def _results(schedule: scheduler.Schedule) -> list[dict]:
    return [{"id": r.request.id, "first_token": r.first_token, "finish": r.finish, "preemptions": r.preemptions}
            for r in schedule.records]


def _peak_blocks(rows, block_size: int) -> list[int]:
    return [scheduler.blocks_for(p + o - 1, block_size) for _, _, p, o in rows]


def _trace(rng, n: int, *, burst: bool = False) -> list[tuple]:
    """n requests on a 0.25 s grid; with `burst`, most arrive together (what makes a block budget bind)."""
    gaps = rng.integers(0, 3 if burst else 13, size=n) * 0.25
    gaps[rng.random(n) < (0.05 if burst else 0.15)] = 40.0  # an idle engine waiting for the next arrival
    gaps[0] = rng.integers(0, 5) * 0.25
    arrivals = np.cumsum(gaps)
    prompts = np.where(rng.random(n) < 0.15, 1, rng.integers(1, 24, size=n))
    outputs = np.where(rng.random(n) < 0.15, 1, rng.integers(1, 12, size=n))
    return [(i, float(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


STEP_TIMES = [(1.0, 0.25), (0.5, 0.125), (2.0, 0.5), (0.005, 1.6e-5)]  # the last: about Llama-3-8B on an H100


def _roomy_cases(rng, count: int) -> list[dict]:
    """Enough blocks for every request's worst case at once: nobody is ever preempted or kept out for blocks."""
    cases = []
    for k in range(count):
        rows = _trace(rng, int(rng.integers(1, 13)))
        block_size = int(rng.choice([1, 2, 4, 16]))
        max_batch = 1 if k == 0 else int(rng.integers(1, 6))
        step_time = STEP_TIMES[k % len(STEP_TIMES)]
        cases.append(_case(rows, sum(_peak_blocks(rows, block_size)), block_size, max_batch, step_time))
    return cases


def _tight_cases(rng, count: int, policy: str, *, must_preempt: bool) -> list[dict]:
    """The largest request's worst case in blocks, plus 0 to 2: the budget binds; the first case fits exactly."""
    cases = []
    while len(cases) < count:
        rows = _trace(rng, int(rng.integers(3, 13)), burst=True)
        block_size = int(rng.choice([1, 2, 4]))
        spare = 0 if not cases else int(rng.integers(0, 3))
        case = _case(rows, max(_peak_blocks(rows, block_size)) + spare, block_size, int(rng.integers(2, 7)),
                     STEP_TIMES[len(cases) % 3])
        if not must_preempt or any(r["preemptions"] for r in _results(_schedule(policy, **case))):
            cases.append(case)
    return cases


def _hint(got: list, expected: list, policy: str) -> str:
    """What the first difference usually means."""
    if policy == "static":
        return ("In static batching a new batch starts only when every member of the last one has finished, takes "
                "waiting requests in order (by arrival, ties in the order of the list, not of ids) while fewer "
                "than max_batch are in it and their worst case, "
                "ceil((prompt_len + output_len - 1) / block_size) blocks each, still fits.")
    got_preempted, expected_preempted = sum(r["preemptions"] for r in got), sum(r["preemptions"] for r in expected)
    admission = "admission (queue order, nobody overtakes the head, the blocks of the whole prompt)"
    if expected_preempted and not got_preempted:
        return (f"The reference preempted{unredacted(f' {expected_preempted} time(s)')} and you never did. Usually "
                "your decodes take a block even when none is free, so your cache holds more than num_blocks blocks: "
                f"the most recently admitted running request must give up its blocks. If they do check, look at "
                f"{admission}.")
    if any(g["preemptions"] != e["preemptions"] for g, e in zip(got, expected)):
        return ("Different requests were preempted. Decodes get their blocks in admission order, oldest first; the "
                "victim is the most recently admitted running request (possibly the one asking), and it goes back "
                f"to the front of the queue, with no admissions in that step. Or {admission} put other requests "
                "in the batch.")
    if expected_preempted:
        return ("The preemptions match but the times do not: a preempted request, readmitted, must prefill its prompt "
                "and every token it had generated (its cache was freed), and that prefill emits its next token; "
                "every token is stamped with the clock at the end of its step. If those are right, look at "
                f"{admission}.")
    if any(g["first_token"] != e["first_token"] for g, e in zip(got, expected)):
        return ("A first token came out at the wrong time: a request that has arrived by the end of a step can be "
                "admitted into the next one (no waiting for the batch to finish), in queue order (by arrival, ties in "
                "the order of the list, not of ids), while fewer than "
                "max_batch run and its prompt's blocks are free; each token is stamped at the end of its step.")
    return ("The last tokens came out at the wrong time: each running request decodes one token per step, a step "
            "costs a + b x (all new tokens in it), and a request leaves the batch in the step of its last token.")


def _schedules(student, function: str, cases: list[dict], policy: str, hidden: bool) -> None:
    """Each case's per-request results against the reference scheduler's under `policy`, times within
    TIME_TOLERANCE."""
    __tracebackhide__ = True

    def call(case) -> str:
        shown = f"{len(case['requests'])} requests" + unredacted(  # the budget and the costs are the hidden case's
            f", num_blocks={case['num_blocks']}, block_size={case['block_size']}, max_batch={case['max_batch']}, "
            f"step_time={case['step_time']}")
        if not hidden:
            shown += f", requests={describe(case['requests'])}"
        return f"{function} ({shown})"

    def hint(case, got, expected) -> str:
        same_shape = isinstance(got, list) and len(got) == len(expected) and all(
            isinstance(g, dict) and g.keys() == expected[0].keys() for g in got)
        return _hint(got, expected, policy) if same_shape else ""

    try:
        compare_cases(student, function, cases, lambda **case: _results(_schedule(policy, **case)), returns="list",
                      hidden=hidden, tolerance=(0.0, TIME_TOLERANCE), hint=hint, call=call)
    except CheckFailure as failure:
        if "did not return within" not in str(failure):
            raise
        raise CheckFailure(f"{failure}. A simulation that never ends usually waits for blocks nobody frees: a request "
                           "frees all its blocks in the step of its last token (and when it is preempted), and the "
                           "clock jumps to the next arrival when nothing runs.") from None


@check(points=2)
def simulate_static(student, rng, hidden):
    """simulate_static holds each batch until its longest member finishes, its worst case in blocks reserved."""
    cases = [_case(VISIBLE_TRACE, 8, 2, 2, (1.0, 0.25)), _case(VISIBLE_IDLE_TRACE, 2, 1, 4, (1.0, 0.25))]
    if hidden:
        cases = [_case(UNSORTED_TRACE, 16, 2, 1, (1.0, 0.25))]
        cases += _roomy_cases(rng, 4) + _tight_cases(rng, 4, "static", must_preempt=False)
    _schedules(student, "simulate_static", cases, "static", hidden)


@check(points=3)
def continuous_without_preemption(student, rng, hidden):
    """simulate_continuous admits waiting requests every step, into the slots that finished requests free."""
    cases = [_case(VISIBLE_TRACE, 8, 2, 2, (1.0, 0.25)), _case(VISIBLE_IDLE_TRACE, 2, 1, 4, (1.0, 0.25))]
    if hidden:
        cases = [_case(UNSORTED_TRACE, 16, 2, 1, (1.0, 0.25))] + _roomy_cases(rng, 8)
    _schedules(student, "simulate_continuous", cases, "continuous", hidden)


@check(points=3)
def continuous_with_preemption(student, rng, hidden):
    """simulate_continuous preempts the newest request when blocks run out, and recomputes it later."""
    cases = [_case(VISIBLE_PREEMPTION_TRACE, 4, 2, 4, (1.0, 0.5))]
    if hidden:
        cases = _tight_cases(rng, 6, "continuous", must_preempt=True)
    _schedules(student, "simulate_continuous", cases, "continuous", hidden)


def _reference_metrics(requests, results) -> dict:
    records = [scheduler.RequestRecord(scheduler.Request(**request), result["first_token"], result["finish"],
                                       result["preemptions"]) for request, result in zip(requests, results)]
    summary = scheduler.metrics(scheduler.Schedule("continuous", records, []))
    return {name: summary[name] for name in METRICS}


@check(points=2)
def latency_metrics(student, rng, hidden):
    """latency_metrics gives p50 and p99 of TTFT and TPOT (first token excluded) and output tokens per second."""
    cases = [_case(VISIBLE_TRACE, 8, 2, 2, (1.0, 0.25))]
    if hidden:
        one_token = [(i, t, p, 1) for i, t, p, _ in _trace(rng, 5)]  # TPOT undefined for every request: NaN
        cases = [_case(one_token, 64, 4, 3, (1.0, 0.25)), _case([(0, 2.0, 5, 4)], 4, 4, 1, (1.0, 0.25))]
        cases += _roomy_cases(rng, 3) + _tight_cases(rng, 2, "continuous", must_preempt=False)
    for i, case in enumerate(cases, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)} ({len(case['requests'])} requests)"
        requests, results = case["requests"], _results(_schedule("continuous", **case))
        expected = _reference_metrics(requests, results)
        got = student.call("latency_metrics", requests, results, returns="mapping")
        try:
            assert_close(got, expected, rtol=1e-9, atol=1e-12)
        except CheckFailure as failure:
            raise CheckFailure(
                f"{label}: latency_metrics: {failure}. TTFT = first_token - arrival; TPOT = (finish - first_token) / "
                "(output_len - 1), over the requests of 2 or more output tokens (NaN when there are none); "
                "percentiles as np.percentile computes them; throughput = all output tokens / (last finish - first "
                "arrival).") from None
