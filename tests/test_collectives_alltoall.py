"""All-to-all from point-to-point messages, against torch's, and the MoE layer on p ranks against one process."""

import pytest
import torch
import torch.distributed as dist

from aisys.collectives import alltoall, traffic
from aisys.collectives.launch import RanksFailed, run_ranks

WORLD_SIZES = [1, 2, 3, 4, 5]


def split_matrix(p: int, seed: int, *, zeros: bool) -> torch.Tensor:
    """(p, p) rows sent from rank a (row) to rank b (column), the same on every rank; some 0 if `zeros`."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0 if zeros else 1, 4, (p, p), generator=generator)
    if zeros and p > 1:
        rows[p - 1] = 0  # the last rank sends nothing at all
    return rows


def ours_and_torchs_all_to_all_single():
    """On one rank: several cases, each run by alltoall.all_to_all_single and dist.all_to_all_single."""
    rank, p = dist.get_rank(), dist.get_world_size()
    cases = [(None, torch.float32, (2 * p,)), (None, torch.int64, (p, 3))]
    cases += [(split_matrix(p, seed, zeros=zeros), dtype, ())
              for seed, (zeros, dtype) in enumerate([(False, torch.float64), (True, torch.float32),
                                                     (True, torch.int32)])]
    results = []
    for splits, dtype, shape in cases:
        if splits is None:
            input_splits = output_splits = None
            rows, width = shape[0], shape[1:]
            out_rows = rows
        else:
            input_splits, output_splits = splits[rank].tolist(), splits[:, rank].tolist()
            rows, out_rows, width = sum(input_splits), sum(output_splits), (2,)
        data = (torch.arange(rows * max(1, torch.Size(width).numel())) + 1000 * rank).to(dtype).reshape(rows, *width)
        ours = torch.full((out_rows, *width), -1).to(dtype)
        theirs = torch.full((out_rows, *width), -1).to(dtype)
        alltoall.all_to_all_single(ours, data, output_splits, input_splits)
        dist.all_to_all_single(theirs, data, output_splits, input_splits)
        results.append(torch.equal(ours, theirs))
    return results


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_to_all_single_equals_torchs_with_equal_unequal_and_zero_splits(world_size):
    for rank, equal in enumerate(run_ranks(ours_and_torchs_all_to_all_single, world_size)):
        assert all(equal), f"rank {rank}: cases {equal}"


def block(sender: int, receiver: int, size: int) -> torch.Tensor:
    return torch.arange(size) + 100.0 * sender + 10 * receiver


def ours_and_torchs_all_to_all():
    """Equal blocks against dist.all_to_all (gloo's needs them equal); ragged ones against the blocks sent."""
    rank, p = dist.get_rank(), dist.get_world_size()
    inputs = [block(rank, q, 3) for q in range(p)]
    ours, theirs = [torch.full((3,), -1.0) for q in range(p)], [torch.full((3,), -1.0) for q in range(p)]
    alltoall.all_to_all(ours, inputs)
    dist.all_to_all(theirs, inputs)
    sizes = split_matrix(p, 7, zeros=True)
    ragged = [torch.full((int(sizes[q, rank]),), -1.0) for q in range(p)]
    alltoall.all_to_all(ragged, [block(rank, q, int(sizes[rank, q])) for q in range(p)])
    expected = [block(q, rank, int(sizes[q, rank])) for q in range(p)]
    return all(map(torch.equal, ours, theirs)) and all(map(torch.equal, ragged, expected))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_to_all_of_lists_equals_torchs(world_size):
    assert all(run_ranks(ours_and_torchs_all_to_all, world_size))


def test_exchange_counts_transposes_the_count_matrix():
    def exchange():
        rank, p = dist.get_rank(), dist.get_world_size()
        flat = alltoall.exchange_counts([10 * rank + q for q in range(p)])
        pairs = alltoall.exchange_counts(torch.tensor([[rank, q] for q in range(p)]))
        return flat.tolist(), pairs.tolist()

    for rank, (flat, pairs) in enumerate(run_ranks(exchange, 3)):
        assert flat == [10 * q + rank for q in range(3)]
        assert pairs == [[q, rank] for q in range(3)]


def test_pairwise_schedule_is_a_permutation_in_every_step():
    for p in WORLD_SIZES:
        schedules = [alltoall.pairwise_schedule(r, p) for r in range(p)]
        for step in range(p - 1):
            sends = [schedules[r][step][0] for r in range(p)]
            assert sorted(sends) == list(range(p)) and all(s != r for r, s in enumerate(sends))
            for r in range(p):  # whoever r sends to receives from r in the same step
                assert schedules[sends[r]][step][1] == r
        assert all(sorted(s for s, _ in schedule) == [q for q in range(p) if q != r]
                   for r, schedule in enumerate(schedules))


def recorded_all_to_all(splits, check_splits):
    rank = dist.get_rank()
    input_splits, output_splits = splits[rank].tolist(), splits[:, rank].tolist()
    output = torch.empty(sum(output_splits), 3, dtype=torch.float64)
    with traffic.record() as log:
        alltoall.all_to_all_single(output, torch.zeros(sum(input_splits), 3, dtype=torch.float64),
                                   output_splits, input_splits, check_splits=check_splits)
    return [m.to_plain() for m in log.messages]


@pytest.mark.parametrize("world_size", [2, 4, 5])
def test_each_rank_sends_one_message_per_peer_with_rows_in_the_pairwise_order(world_size):
    """No message to itself or for an empty block; in step k, to (r + k) % p and from (r - k) % p."""
    p = world_size
    splits = split_matrix(p, 3, zeros=True)
    for rank, messages in enumerate(run_ranks(recorded_all_to_all, p, [(splits, False)] * p)):
        order = alltoall.pairwise_schedule(rank, p)
        sends = [(q, int(splits[rank, q]) * 3) for q, _ in order if splits[rank, q]]
        receives = [(q, int(splits[q, rank]) * 3) for _, q in order if splits[q, rank]]
        assert [(m["peer"], m["numel"]) for m in messages if m["kind"] == "send"] == sends
        assert [(m["peer"], m["numel"]) for m in messages if m["kind"] == "recv"] == receives
        assert all(m["dtype"] == "float64" for m in messages)


def test_checking_the_splits_costs_one_small_message_per_peer_first():
    p = 3
    splits = split_matrix(p, 4, zeros=False)
    for messages in run_ranks(recorded_all_to_all, p, [(splits, True)] * p):
        first = [m for m in messages if m["dtype"] == "int64"]
        assert [m["numel"] for m in first] == [2 * p + 2] * (2 * (p - 1))
        assert messages[:len(first)] == first  # before any data


def failures(fn, world_size, args=None) -> list[str]:
    """The error each rank raised (RanksFailed expected)."""
    with pytest.raises(RanksFailed) as failed:
        run_ranks(fn, world_size, args)
    return [outcome.error for outcome in failed.value.outcomes]


def test_splits_that_disagree_between_sender_and_receiver_stop_every_rank_with_the_same_error():
    def disagree():
        rank = dist.get_rank()
        input_splits = [1, 1, 1]
        output_splits = [2, 1, 1] if rank == 2 else [1, 1, 1]  # rank 2 expects 2 rows from rank 0, which sends 1
        return alltoall.all_to_all_single(torch.empty(sum(output_splits)), torch.zeros(sum(input_splits)),
                                          output_splits, input_splits)

    errors = failures(disagree, 3)
    assert all("splits disagree: rank 0 sends 1 rows to rank 2 (its input_splits[2]), but rank 2 expects 2" in e
               for e in errors), errors
    assert len(set(e.split(" (at")[0] for e in errors)) == 1  # the same message on every rank


@pytest.mark.parametrize("splits, message", [
    ([1, 1], "input_splits must be a list of 3 integers"),
    ([1, 1, 2], "input_splits must add up to the 3 rows"),
    ([1, -1, 3], "input_splits must be a list of 3 integers >= 0"),
])
def test_bad_splits_are_named(splits, message):
    def bad():
        return alltoall.all_to_all_single(torch.empty(3), torch.zeros(3), [1, 1, 1], splits)

    assert all(message in e for e in failures(bad, 3))


def test_bad_tensors_are_named():
    def uneven():
        return alltoall.all_to_all_single(torch.empty(3), torch.zeros(3))

    def mixed_dtypes():
        return alltoall.all_to_all_single(torch.empty(2, dtype=torch.int64), torch.zeros(2))

    def not_a_tensor():
        return alltoall.all_to_all_single([0.0, 0.0], torch.zeros(2))

    assert all("do not divide by the world size 2" in e for e in failures(uneven, 2))
    assert all("output must have input's dtype" in e for e in failures(mixed_dtypes, 2))
    assert all("TypeError: output must be a torch.Tensor" in e for e in failures(not_a_tensor, 2))


# ---------------------------------------------------------------------------------------------- routing


def test_route_sorts_by_expert_keeping_the_order_of_arrival():
    routed = alltoall.route(torch.tensor([2, 0, 2, 1, 0]), 4)
    assert routed.order.tolist() == [1, 4, 3, 0, 2]
    assert routed.counts.tolist() == [2, 1, 2, 0]
    assert routed.dropped == 0


def test_capacity_keeps_the_first_arrivals_and_drops_only_beyond_it():
    # 8 tokens, 4 experts, cf 1: capacity 2. Expert 2 gets 4 tokens: the last two (5, 7) are dropped.
    routed = alltoall.route(torch.tensor([2, 0, 2, 1, 0, 2, 3, 2]), 4, capacity_factor=1.0)
    assert routed.order.tolist() == [1, 4, 3, 0, 2, 6]
    assert routed.counts.tolist() == [2, 1, 2, 1]
    assert routed.dropped == 2
    exactly_full = alltoall.route(torch.tensor([0, 0, 1, 1]), 2, capacity_factor=1.0)
    one_over = alltoall.route(torch.tensor([0, 0, 0, 1]), 2, capacity_factor=1.0)
    assert (exactly_full.dropped, one_over.dropped) == (0, 1)
    assert one_over.order.tolist() == [0, 1, 3]


def test_capacity_is_the_ceiling_of_assignments_times_factor_over_experts():
    assert alltoall.expert_capacity(10, 4, 1.0) == 3
    assert alltoall.expert_capacity(8, 4, 1.25) == 3
    assert alltoall.expert_capacity(16, 8, 1.0) == 2
    assert alltoall.expert_capacity(0, 4, 2.0) == 0
    assert alltoall.expert_capacity(5, 4, None) is None


def test_top_2_routing_serves_every_first_choice_before_any_second():
    # 3 tokens, 2 experts, top-2, cf 0.5: capacity ⌈6 · 0.5 / 2⌉ = 2 per expert.
    ids = torch.tensor([[0, 1], [0, 1], [1, 0]])
    routed = alltoall.route(ids, 2, capacity_factor=0.5)
    # first choices: assignments 0, 1 (expert 0) and 2 (expert 1); then 3, 4 (expert 1), 5 (expert 0).
    assert routed.order.tolist() == [0, 1, 2, 3]
    assert routed.dropped == 2


def test_route_with_no_tokens():
    routed = alltoall.route(torch.zeros(0, dtype=torch.int64), 3, capacity_factor=1.0)
    assert routed.order.tolist() == [] and routed.counts.tolist() == [0, 0, 0] and routed.dropped == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"expert_ids": [0, 4], "num_experts": 4}, "expert_ids must lie in [0, num_experts) = [0, 4); found 4"),
    ({"expert_ids": [0, -1], "num_experts": 4}, "found -1"),
    ({"expert_ids": [0.0, 1.0], "num_experts": 4}, "expert_ids must be integers"),
    ({"expert_ids": [[[0]]], "num_experts": 4}, "expert_ids must be integers of shape (T,)"),
    ({"expert_ids": [0], "num_experts": 0}, "num_experts must be an integer >= 1"),
    ({"expert_ids": [0], "num_experts": 2, "capacity_factor": 0}, "capacity_factor must be a finite number > 0"),
])
def test_route_names_bad_input(kwargs, message):
    with pytest.raises(ValueError) as error:
        alltoall.route(**kwargs)
    assert message in str(error.value)


def test_experts_must_spread_evenly():
    assert alltoall.experts_per_rank(8, 4) == 2
    with pytest.raises(ValueError, match="num_experts must be a multiple of the world size"):
        alltoall.experts_per_rank(6, 4)


# ---------------------------------------------------------------------------------------------- the MoE layer

C = 4


def moe_case(p: int, seed: int, *, experts_per_rank: int, top_k: int, empty_rank: bool):
    """Tokens per rank (some ranks with none), a router, and every expert's weights, all from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    num_experts = experts_per_rank * p
    counts = torch.randint(1, 9, (p,), generator=generator)
    if empty_rank:
        counts[-1] = 0
    tokens = [torch.randn(int(n), C, generator=generator, dtype=torch.float64) for n in counts]
    gate = torch.randn(C, num_experts, generator=generator, dtype=torch.float64)
    if num_experts > top_k:
        gate[:, -1] = -100.0  # the last expert is never chosen: it receives no tokens
    weights = torch.randn(num_experts, C, C, generator=generator, dtype=torch.float64)
    return tokens, gate, weights


def moe_on_ranks(case, top_k, capacity_factor):
    tokens, gate, weights = case
    rank, p = dist.get_rank(), dist.get_world_size()
    local = gate.shape[1] // p
    mine = weights[rank * local:(rank + 1) * local]
    return alltoall.moe_layer(tokens[rank], gate, mine, top_k=top_k, capacity_factor=capacity_factor)


MOE_SETTINGS = [(1, None), (1, 1.0), (2, None), (2, 0.75)]  # (top_k, capacity_factor)


def moe_cases(p: int) -> list:
    return [moe_case(p, 10 * p + i, experts_per_rank=1 + (p % 2), top_k=top_k, empty_rank=p > 1)
            for i, (top_k, _) in enumerate(MOE_SETTINGS)]


def every_setting_on_ranks(cases):
    return [moe_on_ranks(case, top_k, capacity_factor) for case, (top_k, capacity_factor) in zip(cases, MOE_SETTINGS)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_moe_layer_on_p_ranks_equals_the_single_process_computation(world_size):
    """Top-1 and top-2, with and without a capacity; a rank with no tokens and an expert that gets none."""
    p, cases = world_size, moe_cases(world_size)
    outputs = run_ranks(every_setting_on_ranks, p, [(cases,)] * p)
    for i, (case, (top_k, capacity_factor)) in enumerate(zip(cases, MOE_SETTINGS)):
        expected = alltoall.moe_dense(*case, top_k=top_k, capacity_factor=capacity_factor)
        for rank in range(p):
            torch.testing.assert_close(outputs[rank][i], expected[rank], msg=f"rank {rank}, setting {i}")


def dispatched(tokens_per_rank, ids_per_rank, num_experts, capacity_factor):
    rank = dist.get_rank()
    received, experts, plan = alltoall.dispatch(tokens_per_rank[rank], ids_per_rank[rank], num_experts,
                                                capacity_factor)
    back = alltoall.combine(received, plan)  # the identity expert: combine must restore each token
    return received, experts, plan.recv_splits, plan.dropped, back


def test_hot_expert_gets_every_token_and_capacity_drops_the_late_ones_to_zero():
    """Every token to expert 0 (on rank 0): rank 0 receives all, by source rank; cf 1 keeps ⌈T/E⌉ of each rank's."""
    p, num_experts = 3, 6
    tokens = [torch.arange(6 * C, dtype=torch.float32).reshape(6, C) + 100 * r for r in range(p)]
    hot = [torch.zeros(6, dtype=torch.int64)] * p
    results = run_ranks(dispatched, p, [(tokens, hot, num_experts, None)] * p)
    received, experts, recv_splits, dropped, back = results[0]
    torch.testing.assert_close(received, torch.cat(tokens))
    assert experts.tolist() == [0] * 18 and recv_splits == [6, 6, 6] and dropped == 0
    assert all(result[0].shape == (0, C) for result in results[1:])
    for rank, result in enumerate(results):
        torch.testing.assert_close(result[4], tokens[rank])

    capped = run_ranks(dispatched, p, [(tokens, hot, num_experts, 1.0)] * p)
    received, _, recv_splits, dropped, back = capped[0]
    assert recv_splits == [1, 1, 1] and dropped == 5  # capacity ⌈6 · 1 / 6⌉ = 1: the first token of each rank
    torch.testing.assert_close(received, torch.stack([t[0] for t in tokens]))
    for rank, result in enumerate(capped):
        torch.testing.assert_close(result[4][0], tokens[rank][0])
        assert not result[4][1:].any(), "a dropped token gets 0 from the MoE layer"


def test_received_rows_are_grouped_by_source_then_expert():
    p, num_experts = 2, 4
    ids = [torch.tensor([3, 2, 0, 3, 2]), torch.tensor([2, 3, 1, 2])]
    tokens = [torch.arange(len(i), dtype=torch.float32)[:, None].repeat(1, C) + 10 * r for r, i in enumerate(ids)]
    results = run_ranks(dispatched, p, [(tokens, ids, num_experts, None)] * p)
    received, experts, recv_splits, _, _ = results[1]  # rank 1 holds experts 2 and 3
    assert recv_splits == [4, 3]
    assert experts.tolist() == [2, 2, 3, 3, 2, 2, 3]
    assert received[:, 0].tolist() == [1, 4, 0, 3, 10, 13, 11]


def test_an_expert_id_out_of_range_on_one_rank_stops_every_rank_with_the_same_error():
    def bad_on_rank_1():
        rank = dist.get_rank()
        return alltoall.dispatch(torch.zeros(2, C), [0, 5] if rank == 1 else [0, 1], 4)

    errors = failures(bad_on_rank_1, 2)
    assert all("expert_ids must lie in [0, num_experts) = [0, 4); rank 1 has 5" in e for e in errors), errors


def test_experts_that_do_not_spread_over_the_ranks_stop_every_rank():
    def uneven():
        return alltoall.dispatch(torch.zeros(2, C), [0, 1], 3)

    assert all("num_experts must be a multiple of the world size" in e for e in failures(uneven, 2))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for NCCL")
def test_on_gpus_with_nccl():
    p = torch.cuda.device_count() if torch.cuda.device_count() < 4 else 4

    def on_gpu(case):
        device = torch.device("cuda", dist.get_rank())
        tokens, gate, weights = (x.to(device) if isinstance(x, torch.Tensor) else [t.to(device) for t in x]
                                 for x in case)
        out = moe_on_ranks((tokens, gate, weights), 2, 1.0).cpu()
        return out, ours_and_torchs_all_to_all_single_on(device)

    case = moe_case(p, 99, experts_per_rank=2, top_k=2, empty_rank=True)
    results = run_ranks(on_gpu, p, [(case,)] * p, backend="nccl")
    expected = alltoall.moe_dense(*case, top_k=2, capacity_factor=1.0)
    for rank, (output, equal) in enumerate(results):
        torch.testing.assert_close(output, expected[rank])
        assert equal


def ours_and_torchs_all_to_all_single_on(device) -> bool:
    rank, p = dist.get_rank(), dist.get_world_size()
    splits = split_matrix(p, 5, zeros=True)
    data = torch.arange(int(splits[rank].sum()), device=device, dtype=torch.float32) + 100 * rank
    ours = torch.full((int(splits[:, rank].sum()),), -1.0, device=device)
    theirs = ours.clone()
    alltoall.all_to_all_single(ours, data, splits[:, rank].tolist(), splits[rank].tolist())
    dist.all_to_all_single(theirs, data, splits[:, rank].tolist(), splits[rank].tolist())
    return bool(torch.equal(ours, theirs))
