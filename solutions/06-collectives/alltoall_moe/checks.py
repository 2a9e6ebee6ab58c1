"""Checks: all-to-all from point-to-point messages, and MoE dispatch and combine.

The student's functions run on real processes (`student.call_ranks`, gloo), every case of one
world size in one process group. Expectations are computed here, in one process, from every
rank's inputs: the all-to-all by concatenating the blocks addressed to each rank, the MoE
layout from the reference's `route` of each rank's tokens. The point-to-point messages each
rank posted are recorded, so that the schedule and the bytes sent are checked too; a
collective call fails the case. Visible cases: 2 to 4 ranks, float32 (float64 tokens in one MoE
case), readable values.
Hidden cases: 1 to 4 ranks; equal, ragged and empty blocks; a rank with nothing to send or
nothing to receive; rows of one and of two axes; four dtypes; E = p and E = 2p experts; every
token to one expert (the hot expert), in float64 tokens (the others are float32: a buffer made
in torch's default dtype shows); a rank with no tokens; no capacity and capacity factors from
0.5 to 2, with an expert exactly at capacity and one just over it.
"""

import numpy as np
import torch

from aisys.collectives import alltoall as reference
from aisys.collectives.launch import first_cause

from aisys_grader.checks import check
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, raised, unredacted

DTYPES = ("float32", "float64", "int64", "int32")
SENTINEL = -7  # what `output` holds before the call: a block nobody wrote still shows it
WIDTH = 3  # C, the width of a token
CAPACITY_FACTORS = (None, 0.5, 1.0, 1.25, 2.0)  # exact in binary: ⌈T·cf/E⌉ has one right answer


def _label(hidden: bool, i: int, n: int, p: int, what: str) -> str:
    return f"{'hidden case' if hidden else 'case'} {i + 1} of {n} (p = {p}, {what})"


def _run(student, function: str, cases: list, labels: list[str], p: int) -> list[list[dict]]:
    """call_ranks; CheckFailure naming the case and the rank that raised first (not one that saw a peer leave)."""
    outcomes = student.call_ranks(function, cases, world_size=p)
    for label, per_rank in zip(labels, outcomes):
        errors = [(rank, o["error"]) for rank, o in enumerate(per_rank) if o["error"]]
        if errors:
            rank, error = first_cause(errors)
            raise CheckFailure(f"{label}: rank {rank} raised {raised(error)}{_error_hint(error)}")
    return outcomes


def _error_hint(error: str) -> str:
    if "CollectiveNotAllowed" in error:
        return " — build it from dist.isend / dist.irecv (or dist.send / dist.recv) only"
    if "split_with_sizes" in error or "split_sizes" in error:
        return (" — cut input into blocks by input_splits (the rows you send to each rank) and output by "
                "output_splits (the rows each rank sends you)")
    return ""


# ---------------------------------------------------------------------------------------------- all-to-all


def _a2a_case(rng, p: int, splits: np.ndarray, dtype: str, width: int | None, hidden: bool) -> dict:
    """Per-rank inputs with all-distinct values, and the splits: splits[a, b] rows go from rank a to rank b."""
    row = () if width is None else (width,)
    inputs = []
    for r in range(p):
        shape = (int(splits[r].sum()), *row)
        if hidden:
            values = rng.permutation(10_000)[:int(np.prod(shape))] + 10_000 * r
        else:
            values = np.arange(int(np.prod(shape))) + 100 * r
        inputs.append(values.reshape(shape).astype(dtype))
    return {"splits": splits, "inputs": inputs, "dtype": dtype, "row": row}


def _a2a_args(case: dict, rank: int) -> list:
    splits = case["splits"]
    output = np.full((int(splits[:, rank].sum()), *case["row"]), SENTINEL, dtype=case["dtype"])
    return [output, case["inputs"][rank], splits[:, rank].tolist(), splits[rank].tolist()]


def _blocks(case: dict, rank: int) -> list[np.ndarray]:
    """The blocks rank `rank` must receive, by source rank: block `rank` of each source's input."""
    splits = case["splits"]
    starts = np.cumsum(splits, axis=1) - splits
    return [case["inputs"][q][starts[q, rank]:starts[q, rank] + splits[q, rank]] for q in range(len(splits))]


def _a2a_what(case: dict) -> str:
    rows = "equal splits" if np.all(case["splits"] == case["splits"][0, 0]) else "unequal splits"
    shape = f"rows of {case['row'][0]}" if case["row"] else "one element per row"
    splits = unredacted(f"; input_splits of rank r = row r of {case['splits'].tolist()}")  # a hidden input
    return f"{case['dtype']}, {rows}, {shape}{splits}"


def _visible_a2a(rng) -> dict[int, list[dict]]:
    return {2: [_a2a_case(rng, 2, np.array([[2, 2], [2, 2]]), "float32", None, False)],
            3: [_a2a_case(rng, 3, np.array([[1, 2, 0], [3, 1, 1], [0, 2, 2]]), "float32", 2, False)]}


def _hidden_a2a(rng) -> dict[int, list[dict]]:
    by_p = {}
    for p in range(1, 5):
        shapes = [np.full((p, p), 2), rng.integers(0, 4, (p, p)),
                  rng.integers(1, 3, (p, p)) * (rng.random((p, p)) < .6)]
        last_sends_nothing, last_gets_nothing = rng.integers(1, 4, (p, p)), rng.integers(1, 4, (p, p))
        last_sends_nothing[-1], last_gets_nothing[:, -1] = 0, 0
        shapes += [last_sends_nothing, last_gets_nothing, np.ones((p, p), int)]
        by_p[p] = [_a2a_case(rng, p, s, str(rng.choice(DTYPES)), None if rng.random() < .5 else int(rng.integers(1, 4)),
                             True) for s in shapes]
    return by_p


def _a2a_cases(rng, hidden: bool) -> dict[int, list[dict]]:
    return _hidden_a2a(rng) if hidden else _visible_a2a(rng)


def _misplaced(got: np.ndarray, blocks: list[np.ndarray]) -> str:
    """Which source's rows sit where another's should, if the output holds the right blocks in the wrong places."""
    start = 0
    for q, expected in enumerate(blocks):
        mine = got[start:start + len(expected)]
        start += len(expected)
        if len(expected) and not np.array_equal(mine, expected):
            if np.all(mine == SENTINEL):
                return (f": the rows from rank {q} were never written (output still holds {SENTINEL} there); "
                        "receive each block straight into its slice of output")
            other = next((o for o, b in enumerate(blocks) if len(b) and o != q and b.shape == mine.shape
                          and np.array_equal(b, mine)), None)
            if other is not None:
                return (f": the rows from rank {other} sit where rank {q}'s belong. output holds the blocks in order "
                        "of their source rank, not in the order they arrive in")
            return f": the rows where rank {q}'s belong are not rank {q}'s block for this rank"
    return ""


@check(points=3)
def all_to_all_single(student, rng, hidden):
    """all_to_all_single fills output with the blocks every rank sends to this one, in rank order."""
    by_p = _a2a_cases(rng, hidden)
    total, done = sum(map(len, by_p.values())), 0
    for p, cases in by_p.items():
        labels = [_label(hidden, done + i, total, p, _a2a_what(c)) for i, c in enumerate(cases)]
        outcomes = _run(student, "all_to_all_single", [[_a2a_args(c, r) for r in range(p)] for c in cases], labels, p)
        for label, case, per_rank in zip(labels, cases, outcomes):
            for rank, outcome in enumerate(per_rank):
                blocks = _blocks(case, rank)
                expected = np.concatenate(blocks).astype(case["dtype"])
                got = outcome["tensors"][0]
                where = f"{label}, rank {rank}: output"
                if got.shape == expected.shape and np.all(got == SENTINEL) and expected.size:
                    returned = outcome["value"]
                    done_elsewhere = isinstance(returned, np.ndarray) and returned.shape == expected.shape \
                        and np.array_equal(returned, expected)
                    raise CheckFailure(f"{where} was not changed" + (
                        ": you returned the right rows, but output must be filled in place, as "
                        "dist.all_to_all_single does (receive into output's slices, or output.copy_(...))"
                        if done_elsewhere else ": receive into slices of output (output.split(output_splits))"))
                try:
                    assert_close(got, expected, where=where)
                except CheckFailure as failure:
                    raise CheckFailure(f"{failure}{_misplaced(got, blocks)}") from None
        done += len(cases)


def _xor_order(rank: int, p: int) -> list[int] | None:
    return [rank ^ k for k in range(1, p)] if p & (p - 1) == 0 else None


def _schedule_problem(messages: list[dict], kind: str, blocks: list[int], rank: int, p: int, row: int) -> str | None:
    """What is wrong with one rank's sends (or receives), or None; `blocks[q]` rows go to (or come from) rank q."""
    mine = [m for m in messages if m["kind"] == kind]
    to, with_ = ("to", "sent") if kind == "send" else ("from", "received")
    peers = [m["peer"] for m in mine]
    if rank in peers:
        return f"it {with_} a message {to} itself: a rank keeps its own block with a local copy, no message"
    for q in range(p):
        if q == rank:
            continue
        sizes = [m["numel"] for m in mine if m["peer"] == q]
        nonempty = [s for s in sizes if s]
        if (blocks[q] and nonempty != [blocks[q] * row]) or (not blocks[q] and nonempty):
            count = "one message" if blocks[q] else "no message (the block is empty)"
            relay = (": more than the block, as if other ranks' blocks went through here. Each block goes straight "
                     "from its source to its destination: relayed through one rank, they all cross that rank's "
                     "link" if sum(sizes) > blocks[q] * row else "")
            return (f"it {with_} {len(nonempty)} non-empty message(s) {to} rank {q} holding {sum(sizes)} elements; "
                    f"expected {count} {to} rank {q} with the {blocks[q]} row(s) of its block ({blocks[q] * row} "
                    f"elements){relay}. Each block travels whole, once")
        if len(sizes) > 1:
            return (f"it {with_} {len(sizes)} messages {to} rank {q}: one per peer is enough (or none if its block is "
                    "empty)")
    step = 1 if kind == "send" else -1
    pairwise = [(rank + step * k) % p for k in range(1, p)]
    xor = _xor_order(rank, p)
    allowed = [order for order in (pairwise, xor) if order is not None]
    if not any([q for q in order if q in peers] == peers for order in allowed):
        return (f"its {kind}s went {to} ranks {peers} in that order; the pairwise-exchange schedule goes {to} "
                f"(r {'+' if step > 0 else '-'} k) % p in step k = 1 .. p - 1, here {pairwise}"
                + (f" (or the XOR schedule r ^ k: {xor})" if xor else "")
                + ". In the loop `for q in range(p)` every rank sends to rank 0 first: one receiver takes p - 1 "
                  "messages at once while the other links idle")
    return None


@check(points=2)
def all_to_all_schedule(student, rng, hidden):
    """all_to_all_single sends each block once, straight to its rank, in the pairwise-exchange order."""
    by_p = {p: cases for p, cases in _a2a_cases(rng, hidden).items() if p > 1}
    if not hidden:
        splits = np.array([[1, 1, 2, 0], [2, 0, 1, 1], [1, 2, 1, 1], [0, 1, 1, 2]])
        by_p[4] = [_a2a_case(rng, 4, splits, "float32", None, False)]
    total, done = sum(map(len, by_p.values())), 0
    for p, cases in by_p.items():
        labels = [_label(hidden, done + i, total, p, _a2a_what(c)) for i, c in enumerate(cases)]
        outcomes = _run(student, "all_to_all_single", [[_a2a_args(c, r) for r in range(p)] for c in cases], labels, p)
        for label, case, per_rank in zip(labels, cases, outcomes):
            row = int(np.prod(case["row"])) if case["row"] else 1
            for rank, outcome in enumerate(per_rank):
                for kind, blocks in (("send", case["splits"][rank]), ("recv", case["splits"][:, rank])):
                    problem = _schedule_problem(outcome["messages"], kind, blocks.tolist(), rank, p, row)
                    if problem:
                        raise CheckFailure(f"{label}, rank {rank}: {problem}")
        done += len(cases)


# ---------------------------------------------------------------------------------------------- route


def _route_expected(expert_ids, num_experts, capacity_factor) -> dict:
    routed = reference.route(torch.from_numpy(expert_ids), num_experts, capacity_factor)
    return {"order": routed.order.numpy(), "counts": routed.counts.numpy(), "dropped": routed.dropped}


def _as_ints(value, what: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise CheckFailure(f"{what} must hold integers, got {array.dtype}")
    return array.astype(np.int64).reshape(-1) if array.ndim else array.astype(np.int64)


def _route_result(got, label: str) -> dict:
    if set(got) != {"order", "counts", "dropped"}:
        raise CheckFailure(f"{label}: route must return a dict with keys 'order', 'counts', 'dropped'; got "
                           f"{unredacted(str(sorted(got)), f'{len(got)} other keys')}")
    dropped = np.asarray(got["dropped"])
    if dropped.size != 1:
        given = unredacted(repr(got["dropped"]), describe(got["dropped"]))  # the student's own value
        raise CheckFailure(f"{label}: 'dropped' must be one integer, got {given}")
    return {"order": _as_ints(got["order"], f"{label}: 'order'"),
            "counts": _as_ints(got["counts"], f"{label}: 'counts'"), "dropped": int(dropped.reshape(()))}


def _route_hint(got: dict, expected: dict, expert_ids, num_experts, capacity_factor) -> str:
    capacity = reference.expert_capacity(len(expert_ids), num_experts, capacity_factor)
    if not np.array_equal(got["counts"], expected["counts"]) or got["dropped"] != expected["dropped"]:
        if capacity is None:
            return " — with capacity_factor None no token is dropped: counts are each expert's tokens"
        return (" — the capacity is ⌈T·cf/E⌉"
                + unredacted(f" = ⌈{len(expert_ids)}·{capacity_factor}/{num_experts}⌉ = {capacity}")
                + " tokens per expert: each expert keeps up to that many, whatever the others get")
    if sorted(got["order"].tolist()) == sorted(expected["order"].tolist()):
        return (" — the right tokens in the wrong order: sort by expert, keeping the order of arrival within an "
                "expert (a stable sort: torch.argsort(..., stable=True))")
    return (" — the right number per expert but the wrong tokens: Switch keeps the first tokens to arrive at a full "
            "expert and drops the later ones")


ROUTE_VISIBLE = [([2, 0, 2, 1, 0, 2, 3, 2], 4, 1.0), ([2, 0, 2, 1, 0, 2, 3, 2], 4, None), ([1, 1, 1, 1, 1, 1], 3, 1.0)]


def _skewed(rng, n: int, num_experts: int) -> np.ndarray:
    """Expert ids drawn from a Zipf-like law: expert e with probability ∝ 1 / (e + 1), shuffled."""
    weights = 1 / np.arange(1, num_experts + 1)
    return rng.permutation(num_experts)[rng.choice(num_experts, size=n, p=weights / weights.sum())]


def _route_hidden(rng) -> list[tuple]:
    cases = [([0, 0, 1, 1], 2, 1.0), ([0, 0, 0, 1], 2, 1.0),  # exactly at capacity; one over it
             ([], 3, 1.0), ([0], 1, 0.5), ([5], 8, 2.0), ([3] * 9, 4, 1.25), ([0, 1, 2], 3, None)]
    for _ in range(10):
        num_experts, n = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        ids = _skewed(rng, n, num_experts) if rng.random() < 0.5 else rng.integers(0, num_experts, n)
        cases.append((ids.tolist(), num_experts, CAPACITY_FACTORS[int(rng.integers(len(CAPACITY_FACTORS)))]))
    return cases


@check(points=2)
def route(student, rng, hidden):
    """route sorts a rank's tokens by expert and drops the late ones beyond each expert's capacity."""
    cases = _route_hidden(rng) if hidden else ROUTE_VISIBLE
    for i, (ids, num_experts, capacity_factor) in enumerate(cases):
        expert_ids = np.array(ids, dtype=np.int64)
        call = (f"route(expert_ids={unredacted(str(ids), describe(ids))}, num_experts={num_experts}, "
                f"capacity_factor={unredacted(str(capacity_factor), describe(capacity_factor))})")
        label = f"{'hidden case' if hidden else 'case'} {i + 1} of {len(cases)}: {call}"
        got = _route_result(student.call("route", expert_ids=expert_ids, num_experts=num_experts,
                                         capacity_factor=capacity_factor, returns="mapping"), label)
        expected = _route_expected(expert_ids, num_experts, capacity_factor)
        try:
            assert_close(got, expected)
        except CheckFailure as failure:
            hint = _route_hint(got, expected, expert_ids, num_experts, capacity_factor)
            raise CheckFailure(f"{label}: {failure}{hint}") from None


# ---------------------------------------------------------------------------------------------- dispatch, combine


def _moe_case(rng, p: int, num_experts: int, capacity_factor, *, tokens: list[int], routing: str,
              hidden: bool, dtype: str = "float32") -> dict:
    """Tokens (of `dtype`) and expert ids per rank: routing 'uniform', 'skewed' or 'hot' (every token to one
    expert)."""
    hot = int(rng.integers(num_experts))
    case = {"p": p, "num_experts": num_experts, "capacity_factor": capacity_factor, "routing": routing,
            "dtype": dtype, "tokens": [], "ids": []}
    for r, n in enumerate(tokens):
        if hidden:
            values = rng.standard_normal((n, WIDTH))
        else:  # token i of rank r reads r·100 + i in every column (plus the column / 10)
            values = 100 * r + np.arange(n)[:, None] + np.arange(WIDTH) / 10
        ids = {"uniform": lambda: rng.integers(0, num_experts, n), "skewed": lambda: _skewed(rng, n, num_experts),
               "hot": lambda: np.full(n, hot)}[routing]()
        case["tokens"].append(values.astype(dtype))
        case["ids"].append(np.asarray(ids, dtype=np.int64))
    return case


def _moe_what(case: dict) -> str:
    factor = unredacted(str(case["capacity_factor"]), describe(case["capacity_factor"]))  # a hidden input
    return (f"{case['num_experts']} expert{'s' * (case['num_experts'] != 1)}, capacity_factor {factor}, "
            f"{case['routing']} routing, tokens per rank {[len(t) for t in case['tokens']]} of {case['dtype']}")


def _moe_cases(rng, hidden: bool) -> dict[int, list[dict]]:
    if not hidden:
        visible = np.random.default_rng(6)  # readable, fixed routing
        return {2: [_moe_case(visible, 2, 2, None, tokens=[5, 4], routing="uniform", hidden=False),
                    _moe_case(visible, 2, 4, 1.0, tokens=[6, 6], routing="skewed", hidden=False, dtype="float64")]}
    by_p = {}
    for p in range(1, 5):
        cases = []
        for num_experts in (p, 2 * p):
            for routing in ("uniform", "skewed", "hot"):
                tokens = rng.integers(1, 9, p)
                if routing == "uniform" and p > 1:
                    tokens[rng.integers(p)] = 0  # a rank with no tokens
                # The hot expert overflows under a capacity (E = p) and takes everything without one (E = 2p).
                capacity_factor = ({p: 1.0, 2 * p: None}[num_experts] if routing == "hot" else
                                   CAPACITY_FACTORS[int(rng.integers(len(CAPACITY_FACTORS)))])
                # float64 tokens in the hot cases: a buffer made with torch's default dtype (float32) shows
                cases.append(_moe_case(rng, p, num_experts, capacity_factor, tokens=tokens.tolist(), routing=routing,
                                       hidden=True, dtype="float64" if routing == "hot" else "float32"))
        by_p[p] = cases
    return by_p


def _layout(case: dict) -> list[dict]:
    """What each rank's dispatch must return, computed in this one process from every rank's tokens."""
    p, num_experts = case["p"], case["num_experts"]
    routes = [_route_expected(ids, num_experts, case["capacity_factor"]) for ids in case["ids"]]
    local = num_experts // p
    sent = [tokens[r["order"]] for tokens, r in zip(case["tokens"], routes)]
    sent_experts = [ids[r["order"]] for ids, r in zip(case["ids"], routes)]
    splits = np.array([r["counts"].reshape(p, local).sum(1) for r in routes])  # splits[a, b]: rows from a to b
    starts = np.cumsum(splits, axis=1) - splits
    layouts = []
    for q in range(p):
        rows = [slice(starts[a, q], starts[a, q] + splits[a, q]) for a in range(p)]
        layouts.append({
            "received": np.concatenate([sent[a][rows[a]] for a in range(p)]).reshape(-1, WIDTH).astype(case["dtype"]),
            "experts": np.concatenate([sent_experts[a][rows[a]] for a in range(p)]).astype(np.int64),
            "plan": {"order": routes[q]["order"].tolist(), "send_splits": splits[q].tolist(),
                     "recv_splits": splits[:, q].tolist(), "num_tokens": len(case["tokens"][q])},
        })
    return layouts


def _plan_result(plan, where: str) -> dict:
    keys = {"order", "send_splits", "recv_splits", "num_tokens"}
    if not isinstance(plan, dict) or set(plan) != keys:
        given = unredacted(str(sorted(plan)), f"{len(plan)} other keys") if isinstance(plan, dict) else \
            type(plan).__name__  # the student's own text
        raise CheckFailure(f"{where}: the plan must be a dict with keys {sorted(keys)}; got {given}")
    return {key: (int(np.asarray(value).reshape(())) if key == "num_tokens"
                  else _as_ints(value, f"{where}[{key!r}]").tolist())
            for key, value in plan.items()}


def _dispatch_bytes_problem(messages: list[dict], case: dict, layouts: list[dict], rank: int) -> str | None:
    """The token rows this rank sent to each peer must be exactly the rows bound for that peer's experts."""
    dtype = case["dtype"]
    for q in range(case["p"]):
        if q == rank:
            continue
        rows = layouts[rank]["plan"]["send_splits"][q]
        sent = sum(m["numel"] for m in messages if m["kind"] == "send" and m["peer"] == q and m["dtype"] == dtype)
        if sent != rows * WIDTH:
            kept = sum(layouts[rank]["plan"]["send_splits"])
            why = (": that is every token it kept, sent to every rank; send each rank only the rows for its "
                   "experts (p times fewer bytes)" if sent == kept * WIDTH else "")
            return (f"it sent {sent} {dtype} elements to rank {q}; rank {q}'s experts get {rows} of its tokens "
                    f"({rows * WIDTH} elements){why}")
    return None


def _require_dtype(got, dtype: str, where: str, source: str, make: str) -> None:
    """An array made by the student holds the dtype of the tensor its rows come from."""
    try:
        assert_format(got, dtype, where=where)
    except CheckFailure as failure:
        raise CheckFailure(f"{failure}, the dtype of {source}: make it with {source}.{make}(...) (torch.zeros and "
                           "torch.empty make float32)") from None


@check(points=3)
def dispatch(student, rng, hidden):
    """dispatch sends each token only to its expert's rank: rows by source rank, then expert, and the plan."""
    by_p = _moe_cases(rng, hidden)
    total, done = sum(map(len, by_p.values())), 0
    for p, cases in by_p.items():
        labels = [_label(hidden, done + i, total, p, _moe_what(c)) for i, c in enumerate(cases)]
        args = [[[c["tokens"][r], c["ids"][r], c["num_experts"], c["capacity_factor"]] for r in range(p)]
                for c in cases]
        outcomes = _run(student, "dispatch", args, labels, p)
        for label, case, per_rank in zip(labels, cases, outcomes):
            layouts = _layout(case)
            for rank, (outcome, expected) in enumerate(zip(per_rank, layouts)):
                where = f"{label}, rank {rank}"
                value = outcome["value"]
                if not isinstance(value, list) or len(value) != 3:
                    raise CheckFailure(f"{where}: dispatch must return (received, experts, plan); got "
                                       f"{type(value).__name__}"
                                       + (f" of {len(value)} items" if isinstance(value, list) else ""))
                received, experts, plan = value
                _require_dtype(received, case["dtype"], f"{where}: received rows", "tokens", "new_empty")
                assert_close(received, expected["received"], where=f"{where}: received rows")
                assert_close(_as_ints(experts, f"{where}: experts"), expected["experts"], where=f"{where}: experts")
                assert_close(_plan_result(plan, f"{where}: plan"), expected["plan"], where=f"{where}: plan")
                problem = _dispatch_bytes_problem(outcome["messages"], case, layouts, rank)
                if problem:
                    raise CheckFailure(f"{where}: {problem}")
        done += len(cases)


def _combined(case: dict, layouts: list[dict], outputs: list[np.ndarray]) -> list[np.ndarray]:
    """Each rank's tokens back in their order: the row expert rank q computed for token i lands at row i."""
    p = case["p"]
    results = []
    for r in range(p):
        plan = layouts[r]["plan"]
        combined = np.zeros((plan["num_tokens"], WIDTH), case["dtype"])
        sent = 0
        for q in range(p):
            start = sum(layouts[q]["plan"]["recv_splits"][:r])
            rows = plan["send_splits"][q]
            combined[plan["order"][sent:sent + rows]] = outputs[q][start:start + rows]
            sent += rows
        results.append(combined)
    return results


def _combine_hint(got: np.ndarray, expected: np.ndarray, plan: dict) -> str:
    order = plan["order"]
    if (len(order) and got.ndim == 2 and got.shape[0] >= len(order)
            and np.array_equal(got[:len(order)], expected[order])):
        return (": the rows are in the order they were sent (by expert); row i of what comes back belongs to "
                "token plan['order'][i]: undo the sort")
    if got.shape == expected.shape and np.array_equal(got[order], expected[order]):
        return ": a token dropped by the capacity must get 0 (the residual connection carries it past the layer)"
    return ""


@check(points=2)
def combine(student, rng, hidden):
    """combine sends the expert outputs back and puts each token's output at its place, 0 for dropped ones."""
    by_p = _moe_cases(rng, hidden)
    total, done = sum(map(len, by_p.values())), 0
    for p, cases in by_p.items():
        labels = [_label(hidden, done + i, total, p, _moe_what(c)) for i, c in enumerate(cases)]
        layouts = [_layout(c) for c in cases]
        # The experts' outputs: anything distinct will do, since combine only moves rows.
        outputs = [[rng.standard_normal(layout["received"].shape).astype(case["dtype"]) for layout in case_layouts]
                   for case, case_layouts in zip(cases, layouts)]
        args = [[[outputs[i][r], layouts[i][r]["plan"]] for r in range(p)] for i in range(len(cases))]
        outcomes = _run(student, "combine", args, labels, p)
        for i, (label, case, per_rank) in enumerate(zip(labels, cases, outcomes)):
            expected = _combined(case, layouts[i], outputs[i])
            for rank, outcome in enumerate(per_rank):
                where = f"{label}, rank {rank}: combined output"
                _require_dtype(outcome["value"], case["dtype"], where, "expert_outputs", "new_zeros")
                try:
                    assert_close(outcome["value"], expected[rank], where=where)
                except CheckFailure as failure:
                    got = outcome["value"]
                    hint = _combine_hint(got, expected[rank], layouts[i][rank]["plan"]) \
                        if isinstance(got, np.ndarray) else ""
                    raise CheckFailure(f"{failure}{hint}") from None
        done += len(cases)
