"""Tests of aisys.inference.scheduler: hand-worked schedules, conservation laws, and bad input."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisys.inference.scheduler import (
    Request,
    Schedule,
    blocks_for,
    linear_step_time,
    metrics,
    roofline_step_time,
    simulate,
    synthetic_trace,
)

STEP = linear_step_time(1.0, 0.25)  # 1 s per step + 0.25 s per new token: every time below is exact in binary
TRACE = [Request(0, 0.0, 4, 3), Request(1, 0.0, 2, 2), Request(2, 1.5, 3, 2)]


def table(schedule: Schedule) -> list[tuple]:
    return [(r.request.id, r.first_token, r.finish, r.preemptions) for r in schedule.records]


def batches(schedule: Schedule) -> list[tuple]:
    return [(s.start, s.batch) for s in schedule.steps]


def test_blocks_for_rounds_up():
    assert [blocks_for(t, 4) for t in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_static_holds_the_batch_until_its_longest_member_finishes():
    schedule = simulate(TRACE, "static", num_blocks=8, block_size=2, max_batch=2, step_time=STEP)
    # step 1 prefills 4 + 2 tokens (1 + 0.25 * 6 = 2.5 s); request 1 is done at 4.0, but request 2
    # (waiting since 1.5) starts only when request 0 is done at 5.25
    assert batches(schedule) == [
        (0.0, ((0, 4, 0), (1, 2, 0))),
        (2.5, ((0, 1, 4), (1, 1, 2))),
        (4.0, ((0, 1, 5),)),
        (5.25, ((2, 3, 0),)),
        (7.0, ((2, 1, 3),)),
    ]
    assert table(schedule) == [(0, 2.5, 5.25, 0), (1, 2.5, 4.0, 0), (2, 7.0, 8.25, 0)]
    # worst cases reserved up front: ceil(6 / 2) + ceil(3 / 2) = 5 blocks while the first batch runs
    assert [s.blocks_used for s in schedule.steps] == [5, 5, 3, 2, 2]


def test_continuous_admits_into_the_freed_slot_at_once():
    schedule = simulate(TRACE, "continuous", num_blocks=8, block_size=2, max_batch=2, step_time=STEP)
    # request 1 finishes at 4.0; request 2 takes its slot in the very next step, beside a decode
    assert batches(schedule) == [
        (0.0, ((0, 4, 0), (1, 2, 0))),
        (2.5, ((0, 1, 4), (1, 1, 2))),
        (4.0, ((0, 1, 5), (2, 3, 0))),
        (6.0, ((2, 1, 3),)),
    ]
    assert table(schedule) == [(0, 2.5, 6.0, 0), (1, 2.5, 4.0, 0), (2, 6.0, 7.25, 0)]
    assert [s.blocks_used for s in schedule.steps] == [3, 5, 5, 2]  # blocks grow with the tokens, not reserved


def test_continuous_preempts_the_newest_and_recomputes_its_tokens():
    trace = [Request(0, 0.0, 3, 4), Request(1, 0.0, 2, 3)]
    schedule = simulate(trace, "continuous", num_blocks=4, block_size=2, max_batch=4,
                        step_time=linear_step_time(1, 0.5))
    # at 5.5 request 0 needs its third block and none is free: request 1 (admitted after it) is
    # evicted; it comes back at 8.5 with its prompt and 2 generated tokens (4 tokens) to prefill,
    # and that prefill emits its last token
    assert batches(schedule) == [
        (0.0, ((0, 3, 0), (1, 2, 0))),
        (3.5, ((0, 1, 3), (1, 1, 2))),
        (5.5, ((0, 1, 4),)),
        (7.0, ((0, 1, 5),)),
        (8.5, ((1, 4, 0),)),
    ]
    assert [s.preempted for s in schedule.steps] == [(), (), (1,), (), ()]
    assert table(schedule) == [(0, 3.5, 8.5, 0), (1, 3.5, 11.5, 1)]


def test_an_evicted_request_waits_at_the_front_of_the_queue():
    # request 2 arrives at 5.0 and needs one block; at 5.5 and 7.0 one is free, but request 1,
    # evicted at 5.5 and needing two, is ahead of it: first come, first served, no overtaking
    trace = [Request(0, 0.0, 3, 4), Request(1, 0.0, 2, 3), Request(2, 5.0, 1, 1)]
    schedule = simulate(trace, "continuous", num_blocks=4, block_size=2, max_batch=4,
                        step_time=linear_step_time(1, 0.5))
    starts = [(s.start, [i for i, _, _ in s.batch]) for s in schedule.steps]
    assert starts[2:] == [(5.5, [0]), (7.0, [0]), (8.5, [1, 2])]
    assert table(schedule) == [(0, 3.5, 8.5, 0), (1, 3.5, 12.0, 1), (2, 12.0, 12.0, 0)]


def test_chunked_prefill_splits_a_prompt_across_steps():
    schedule = simulate(TRACE, "chunked", num_blocks=8, block_size=2, max_batch=2, max_tokens=3, step_time=STEP)
    assert batches(schedule) == [
        (0.0, ((0, 3, 0),)),  # 3 of request 0's 4 prompt tokens: no token out yet
        (1.75, ((0, 1, 3), (1, 2, 0))),  # its last prompt token, and request 1's whole prompt
        (3.5, ((0, 1, 4), (1, 1, 2))),
        (5.0, ((0, 1, 5), (2, 2, 0))),  # request 2's prompt rides along with a decode, 2 of its 3 tokens
        (6.75, ((2, 1, 2),)),
        (8.0, ((2, 1, 3),)),
    ]
    assert table(schedule) == [(0, 3.5, 6.75, 0), (1, 3.5, 5.0, 0), (2, 8.0, 9.25, 0)]
    assert all(sum(new for _, new, _ in s.batch) <= 3 for s in schedule.steps)


def test_clock_jumps_over_idle_gaps():
    trace = [Request(0, 0.0, 1, 1), Request(1, 10.0, 1, 2)]
    for policy in ("static", "continuous"):
        schedule = simulate(trace, policy, num_blocks=2, block_size=1, step_time=STEP)
        assert [s.start for s in schedule.steps] == [0.0, 10.0, 11.25]
        assert table(schedule) == [(0, 1.25, 1.25, 0), (1, 11.25, 12.5, 0)]


def test_a_budget_exactly_fitting_one_request_serves_them_one_at_a_time():
    trace = [Request(i, 0.0, 3, 3) for i in range(3)]  # 5 tokens at their peak: 3 blocks of 2
    for policy in ("static", "continuous"):
        schedule = simulate(trace, policy, num_blocks=3, block_size=2, step_time=STEP)
        finishes = [r.finish for r in schedule.records]
        assert finishes == sorted(finishes) and all(s.blocks_used <= 3 for s in schedule.steps)


def test_chunked_without_a_binding_budget_is_continuous():
    trace = synthetic_trace(40, rate=2.0, seed=3, prompt=(20, 0.8), output=(20, 0.8), max_len=200)
    continuous = simulate(trace, "continuous", num_blocks=60, block_size=4, max_batch=8, step_time=STEP)
    chunked = simulate(trace, "chunked", num_blocks=60, block_size=4, max_batch=8, max_tokens=10**6, step_time=STEP)
    assert table(continuous) == table(chunked) and batches(continuous) == batches(chunked)


traces = st.lists(st.tuples(st.integers(0, 20), st.integers(1, 30), st.integers(1, 20)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(traces, st.sampled_from([1, 2, 4, 16]), st.integers(0, 6), st.integers(1, 6),
       st.sampled_from(["static", "continuous", "chunked"]))
def test_conservation(rows, block_size, spare_blocks, max_batch, policy):
    trace = [Request(i, float(t), p, o) for i, (t, p, o) in enumerate(rows)]
    num_blocks = max(blocks_for(r.peak_tokens, block_size) for r in trace) + spare_blocks
    max_tokens = max_batch + 3 if policy == "chunked" else None
    schedule = simulate(trace, policy, num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                        max_tokens=max_tokens, step_time=STEP)
    for step in schedule.steps:
        assert step.blocks_used <= num_blocks
        assert len(step.batch) <= max_batch
        assert len({i for i, _, _ in step.batch}) == len(step.batch)
        if max_tokens:
            assert sum(new for _, new, _ in step.batch) <= max_tokens
    for record in schedule.records:
        request = record.request
        assert request.arrival <= record.first_token <= record.finish
        if policy == "static":
            assert record.preemptions == 0
    # every output token comes out exactly once, however often its request was evicted and recomputed
    emitted = [i for step in schedule.steps for i in step.emitted]
    assert {r.id: emitted.count(r.id) for r in trace} == {r.id: r.output_len for r in trace}
    # and each eviction costs a recompute: tokens fed = prompt + output - 1 + what the evictions threw away
    fed = {r.id: sum(new for step in schedule.steps for i, new, _ in step.batch if i == r.id) for r in trace}
    assert all(fed[r.id] >= r.peak_tokens for r in trace)
    assert all(fed[r.id] == r.peak_tokens for r, record in zip(trace, schedule.records) if not record.preemptions)
    assert metrics(schedule)["output_tokens"] == sum(r.output_len for r in trace)


def test_continuous_serves_more_than_static_on_the_same_trace():
    trace = synthetic_trace(150, rate=40.0, seed=0)
    step_time = roofline_step_time()
    served = {policy: metrics(simulate(trace, policy, num_blocks=4000, max_batch=32, step_time=step_time))
              for policy in ("static", "continuous")}
    assert served["continuous"]["throughput"] > served["static"]["throughput"]
    assert served["continuous"]["ttft_p50"] < served["static"]["ttft_p50"]


def test_metrics_by_hand():
    schedule = simulate(TRACE, "continuous", num_blocks=8, block_size=2, max_batch=2, step_time=STEP)
    m = metrics(schedule)
    assert m["output_tokens"] == 7 and m["makespan"] == 7.25 and m["throughput"] == 7 / 7.25
    # TTFT 2.5, 2.5, 4.5; TPOT (6 - 2.5) / 2, (4 - 2.5) / 1, (7.25 - 6) / 1
    assert m["ttft_p50"] == 2.5 and m["tpot_p50"] == 1.5 and m["latency_p50"] == 5.75
    assert m["preemptions"] == 0


def test_tpot_is_nan_when_every_request_wants_one_token():
    schedule = simulate([Request(0, 0.0, 5, 1)], "continuous", num_blocks=2, block_size=4, step_time=STEP)
    assert math.isnan(metrics(schedule)["tpot_p50"]) and math.isnan(schedule.records[0].tpot)


def test_synthetic_trace_is_seeded_sorted_and_clipped():
    a, b = synthetic_trace(500, rate=4.0, seed=7, max_len=300), synthetic_trace(500, rate=4.0, seed=7, max_len=300)
    assert a == b
    arrivals = [r.arrival for r in a]
    assert arrivals == sorted(arrivals) and 500 / arrivals[-1] == pytest.approx(4.0, rel=0.15)
    assert all(1 <= r.prompt_len <= 300 and 1 <= r.output_len <= 300 for r in a)


def test_roofline_step_time_matches_the_cost_model():
    step = roofline_step_time()
    assert step([(1, 1000)]) == pytest.approx(4.5e-3, rel=0.05)  # memory-bound decode, as in cost.py's docstring
    assert step([(2000, 0)]) == pytest.approx(29e-3, rel=0.05)


@pytest.mark.parametrize("fields, message", [
    ((0, -1.0, 4, 4), "arrival"),
    ((0, math.nan, 4, 4), "arrival"),
    ((0, 0.0, 0, 4), "prompt_len"),
    ((0, 0.0, 4, -2), "output_len"),
    ((0, 0.0, 4.5, 2), "prompt_len"),
])
def test_bad_request_is_named(fields, message):
    with pytest.raises(ValueError, match=message):
        Request(*fields)


def test_request_id_must_be_an_integer():
    with pytest.raises(TypeError, match="id"):
        Request("a", 0.0, 1, 1)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_blocks": 2}, ValueError, "num_blocks=2 cannot hold request 0"),  # 4 + 3 - 1 tokens = 3 blocks of 2
    ({"num_blocks": 0}, ValueError, "num_blocks"),
    ({"num_blocks": 8, "block_size": 0}, ValueError, "block_size"),
    ({"num_blocks": 8, "max_batch": 0}, ValueError, "max_batch"),
    ({"num_blocks": 8, "policy": "fifo"}, ValueError, "policy"),
    ({"num_blocks": 8, "policy": "chunked"}, ValueError, "max_tokens"),
    ({"num_blocks": 8, "policy": "chunked", "max_batch": 4, "max_tokens": 3}, ValueError, "max_tokens"),
    ({"num_blocks": 8, "max_tokens": 64}, ValueError, "max_tokens"),
    ({"num_blocks": 8, "step_time": 1.0}, TypeError, "step_time"),
    ({"num_blocks": 8, "step_time": lambda batch: 0.0}, ValueError, "step_time"),
])
def test_bad_simulation_arguments_are_named(kwargs, error, message):
    kwargs = {"block_size": 2, **kwargs}
    with pytest.raises(error, match=message):
        simulate(TRACE, **kwargs)


@pytest.mark.parametrize("requests, error, message", [
    ([], ValueError, "at least one"),
    ([(0, 0.0, 1, 1)], TypeError, r"requests\[0\]"),
    ([Request(0, 0.0, 1, 1), Request(0, 1.0, 1, 1)], ValueError, "distinct ids"),
    (5, TypeError, "requests"),
])
def test_bad_requests_are_named(requests, error, message):
    with pytest.raises(error, match=message):
        simulate(requests, num_blocks=4, step_time=STEP)


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0, "rate": 1.0}, "n"),
    ({"n": 5, "rate": 0.0}, "rate"),
    ({"n": 5, "rate": 1.0, "prompt": (0, 1.0)}, "prompt median"),
    ({"n": 5, "rate": 1.0, "output": (10, -1.0)}, "output sigma"),
])
def test_bad_trace_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        synthetic_trace(**kwargs)


def test_step_time_arguments_are_checked():
    with pytest.raises(ValueError, match="a and b"):
        linear_step_time(0, 0)
    with pytest.raises(ValueError, match="b"):
        linear_step_time(1.0, -1.0)
    with pytest.raises(TypeError, match="config"):
        roofline_step_time(config="Llama-3-8B")
    with pytest.raises(ValueError, match="dtype"):
        roofline_step_time(dtype="fp7")
    with pytest.raises(TypeError, match="schedule"):
        metrics([])
