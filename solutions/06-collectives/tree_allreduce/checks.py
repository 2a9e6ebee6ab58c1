"""Checks: recursive doubling, its fold for any p, a binomial tree, and a choice by size.

The student's functions run on real processes (`student.call_ranks`: gloo on CPU), one call per
world size with every case of that size in it. Each check compares every rank's tensor after the
call with the sum the grader computes with numpy, then the messages each rank posted with the
pattern of the algorithm. Inputs are small integers (in every dtype), so that any order of
additions gives the exact sum; element 0 of rank r is 2^r, so that a wrong element 0 says which
ranks' data a rank holds.
"""

import math

import numpy as np

from aisys.collectives import cost, rounds, tree
from aisys.collectives.launch import first_cause

from aisys_grader.checks import check
from aisys_grader.compare import CheckFailure, describe, raised, redacting, unredacted

DTYPES = ["int64", "int32", "float16", "float32", "float64"]


# ---------------------------------------------------------------------------------------------- running


def _inputs(rng, p: int, n: int, shape: tuple, dtype: str) -> list[np.ndarray]:
    """One tensor per rank: small integers, element 0 of rank r being 2^r (exact in every dtype here)."""
    tensors = []
    for rank in range(p):
        values = rng.integers(-8, 9, size=n)
        if n:
            values[0] = 1 << rank
        tensors.append(values.astype(dtype).reshape(shape))
    return tensors


def _cases(rng, p: int, hidden: bool) -> list[tuple]:
    """(shape, dtype) of each case: the visible few; hidden, every dtype, length 0 and 1, a prime, a matrix."""
    if not hidden:
        return [((6,), "int64"), ((5,), "float32")]
    shapes = [(0,), (1,), (13,), (3, 4), (int(rng.integers(2, 40)),)]
    return [(shape, DTYPES[i % len(DTYPES)]) for i, shape in enumerate(shapes)] + [((7,), d) for d in DTYPES[1:]]


def _run(student, function: str, p: int, cases: list, rng, extra_args=()) -> list:
    """Call `function` on p ranks for every case, with the case's `extra_args[i]` after the tensor on every rank;
    (label, inputs, outcomes) for each case, failing on any error."""
    inputs = [_inputs(rng, p, math.prod(shape), shape, dtype) for shape, dtype in cases]
    per_case = [[[inputs[i][rank], *(extra_args[i] if extra_args else [])] for rank in range(p)]
                for i in range(len(cases))]
    results = student.call_ranks(function, per_case, world_size=p)
    done = []
    for i, outcomes in enumerate(results):
        shape, dtype = cases[i]
        label = f"p = {p}, a tensor of shape {shape} and dtype {dtype}"
        errors = [(rank, outcome["error"]) for rank, outcome in enumerate(outcomes) if outcome["error"]]
        if errors:
            rank, error = first_cause(errors)
            raise CheckFailure(f"{label}: rank {rank} raised {raised(error)}")
        done.append((label, inputs[i], outcomes))
    return done


def _contributors(value: float, p: int, rounds: bool) -> str:
    """What element 0 (2^r from rank r) says about the ranks a rank's result holds; with `rounds`, whether that is
    what a loop of too few rounds leaves (a sum over 2^k ranks after k rounds)."""
    if value != int(value) or not 0 <= value < (1 << p):
        return "more than each rank's data once: some rank's data was added twice"
    ranks = [r for r in range(p) if int(value) >> r & 1]
    missing = [r for r in range(p) if r not in ranks]
    held = f"the data of ranks {ranks} only, not of {missing}"
    count = len(ranks)
    if not (rounds and ranks and count & (count - 1) == 0):
        return held
    k, needed = count.bit_length() - 1, math.ceil(math.log2(p))
    return (f"{held}: {count} = 2^{k} of the {p} ranks, what {k} round{'s' * (k != 1)} of messages gather, where "
            f"ceil(log2 p) = {needed} are needed: does the loop stop a round short? (It runs while distance < p.)")


def _require_sums(label: str, inputs: list, outcomes: list, hint: str, rounds: bool = False) -> None:
    """Every rank's tensor after the call equals the sum of the inputs (exact: small integers). `rounds`: the
    algorithm gathers 2^k ranks' data in k rounds, so a partial sum over 2^k ranks is named as rounds missing."""
    p = len(inputs)
    expected = np.sum(np.stack(inputs), axis=0, dtype=inputs[0].dtype)
    for rank, outcome in enumerate(outcomes):
        got = outcome["tensors"][0] if outcome["tensors"] else None
        if got is None or got.shape != expected.shape:
            raise CheckFailure(f"{label}: rank {rank}'s tensor came back with shape "
                               f"{None if got is None else got.shape}, expected {expected.shape}")
        wrong = np.flatnonzero(got.astype(np.float64).ravel() != expected.astype(np.float64).ravel())
        if wrong.size:
            i = int(wrong[0])
            what = ""
            if np.array_equal(got, inputs[rank]):
                what = ": it still holds its own input, as if it took no part"
            elif i == 0:
                what = f": element 0 holds {_contributors(float(got.ravel()[0]), p, rounds)}"
            if redacting():  # the inputs, their sum and what the rank holds are hidden data
                raise CheckFailure(f"{label}: rank {rank} holds another value than the sum over the {p} ranks at flat "
                                   f"index {i}{what}. {hint}")
            raise CheckFailure(f"{label}: rank {rank} holds {got.ravel()[i]} at flat index {i}, expected the sum over "
                               f"the {p} ranks, {expected.ravel()[i]}{what}. {hint}")


def _peers(outcome: dict, kind: str) -> list[int]:
    return [m["peer"] for m in outcome["messages"] if m["kind"] == kind]


def _require_whole_tensors(label: str, outcomes: list, numel: int) -> None:
    for rank, outcome in enumerate(outcomes):
        for m in outcome["messages"]:
            if m["numel"] != numel:
                raise CheckFailure(f"{label}: rank {rank} posted a {m['kind']} of {m['numel']} elements (peer "
                                   f"{m['peer']}); every message of this algorithm carries the whole tensor, {numel}")


# ---------------------------------------------------------------------------------------------- recursive doubling


def _require_rounds(label: str, outcomes: list, expected: list[tuple[list, list]], group_hint: str) -> None:
    """Each rank's sends and receives, in order, go to the expected peers."""
    for rank, (outcome, (sends, recvs)) in enumerate(zip(outcomes, expected)):
        for kind, got, want in (("send", _peers(outcome, "send"), sends), ("recv", _peers(outcome, "recv"), recvs)):
            if got == want:
                continue
            verb = "sent to" if kind == "send" else "received from"
            if len(got) != len(want):
                short = (f" It stopped after {len(got)} of the {len(want)} rounds: does the loop stop a round short? "
                         "(It runs while distance < the group's size.)" if got == want[:len(got)] else "")
                raise CheckFailure(f"{label}: rank {rank} {verb} {len(got)} ranks {got}, expected {len(want)}: "
                                   f"{want}.{short} {group_hint}")
            k = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            raise CheckFailure(f"{label}: rank {rank}'s message {k} {verb} rank {got[k]}, expected rank {want[k]} "
                               f"({verb} {want} in all). {group_hint}")


PARTNER_HINT = ("In round k = 0, 1, ... the partner of the rank at position r of the group is the rank at position "
                "r XOR 2^k, both to send to and to receive from.")


@check(points=3)
def recursive_doubling(student, rng, hidden):
    """recursive_doubling(tensor, group) sums a power-of-two group in log2 p rounds, partner r XOR 2^k."""
    worlds = [1, 2, 4, 8] if hidden else [2, 4]
    for p in worlds:
        # The group in rank order; hidden, also shuffled: a rank's place in the group is what counts.
        groups = [list(range(p))] + ([[int(r) for r in rng.permutation(p)]] if hidden and p > 2 else [])
        cases, case_groups = [], []
        for group in groups:
            for case in _cases(rng, p, hidden):
                cases.append(case)
                case_groups.append([group])
        done = _run(student, "recursive_doubling", p, cases, rng, case_groups)
        for (label, inputs, outcomes), (group,) in zip(done, case_groups):
            in_order = "in rank order" if group == sorted(group) else "in shuffled order"  # the order is the case's
            label += f", the group {in_order}" if redacting() else f", group {group}"
            _require_sums(label, inputs, outcomes, PARTNER_HINT, rounds=True)
            _require_whole_tensors(label, outcomes, inputs[0].size)
            partners = [[group[group.index(rank) ^ (1 << k)] for k in range(p.bit_length() - 1)] for rank in range(p)]
            _require_rounds(label, outcomes, [(mine, mine) for mine in partners], PARTNER_HINT)


FOLD_HINT = ("With p' the largest power of two <= p, ranks 0, 2, ..., 2(p - p') - 2 each send their tensor to the "
             "rank above and later receive the result from it; the p' others run recursive_doubling as a group "
             "(in rank order); then each rank that stood in for another sends it the result.")


@check(points=2)
def any_world_size(student, rng, hidden):
    """recursive_doubling_all_reduce(tensor) works for any p: 2(p - p') ranks fold into p', as in Thakur et al. 2005."""
    worlds = [3, 5, 6, 7, 1, 2] if hidden else [3, 6]
    for p in worlds:
        for label, inputs, outcomes in _run(student, "recursive_doubling_all_reduce", p, _cases(rng, p, hidden), rng):
            _require_sums(label, inputs, outcomes, FOLD_HINT)
            _require_whole_tensors(label, outcomes, inputs[0].size)
            _require_rounds(label, outcomes, [tree.recursive_doubling_peers(r, p) for r in range(p)], FOLD_HINT)


# ---------------------------------------------------------------------------------------------- binomial tree


def _rounds(outcomes: list) -> int:
    """The rounds the messages needed: the longest chain of messages each sent after the one before it arrived
    (and after the sender's previous send): see aisys.collectives.rounds."""
    try:
        return len(rounds.assign([[(m["kind"], m["peer"], m["numel"]) for m in o["messages"]] for o in outcomes]))
    except ValueError as error:
        raise CheckFailure(str(error)) from None


TREE_HINT = ("A binomial tree: in reduce round k, a rank whose lowest set bit is 2^k sends to rank - 2^k, and a rank "
             "whose bits below 2^(k+1) are all 0 receives from rank + 2^k and adds; the broadcast runs the same "
             "rounds backwards, rank 0 sending to the farthest subtree first.")


def _require_binomial_pattern(label: str, outcomes: list, numel: int) -> None:
    p, depth = len(outcomes), math.ceil(math.log2(len(outcomes)))
    if any(m["peer"] < 0 for o in outcomes for m in o["messages"]):
        raise CheckFailure(f"{label}: a receive from any source (src=None): name the rank each receive comes from")
    _require_whole_tensors(label, outcomes, numel)
    total = sum(len(_peers(o, "send")) for o in outcomes)
    if total != 2 * (p - 1):
        short = (" Fewer: some rank's subtree never reached rank 0, or the sum never reached some rank: do both loops "
                 "run ceil(log2 p) rounds? (They run while distance < p.)" if total < 2 * (p - 1) else "")
        raise CheckFailure(f"{label}: the ranks sent {total} messages in all, expected 2(p - 1) = {2 * (p - 1)}: "
                           f"each of the p - 1 edges of the tree carries the tensor once up and once down.{short} "
                           f"{TREE_HINT}")
    for rank, outcome in enumerate(outcomes):
        for kind, verb in (("recv", "received"), ("send", "sent")):
            count = len(_peers(outcome, kind))
            if count > depth:
                flat = (" This is a flat tree: rank 0 receives p - 1 messages in one round, one after the other on "
                        "its one link." if rank == 0 and count == p - 1 else "")
                raise CheckFailure(f"{label}: rank {rank} {verb} {count} messages, expected at most ceil(log2 p) = "
                                   f"{depth}.{flat} {TREE_HINT}")
    needed = _rounds(outcomes)
    if needed > 2 * depth:
        raise CheckFailure(f"{label}: the messages took {needed} rounds, each waiting for the one before (a rank "
                           f"sends one message at a time); a binomial tree needs 2 ceil(log2 p) = {2 * depth}. "
                           f"{TREE_HINT}")


@check(points=3)
def tree_all_reduce(student, rng, hidden):
    """tree_all_reduce(tensor): a binomial-tree reduce to rank 0 and broadcast back, 2(p - 1) messages,
    2 ceil(log2 p) deep."""
    worlds = [1, 2, 3, 5, 6, 7, 8] if hidden else [4, 6]
    for p in worlds:
        for label, inputs, outcomes in _run(student, "tree_all_reduce", p, _cases(rng, p, hidden), rng):
            _require_sums(label, inputs, outcomes, TREE_HINT, rounds=True)
            _require_binomial_pattern(label, outcomes, inputs[0].size)


# ---------------------------------------------------------------------------------------------- choice by size

PAIR = ("ring", "recursive_doubling")
IB = (5e-6, 1 / 50e9)  # InfiniBand NDR: ~5 µs per message, 50 GB/s per direction
NVLINK = (3.4e-6, 1 / 450e9)  # NVLink 4: NCCL's modelled ring-step latency (cost-model page), 450 GB/s per direction
# Dyadic α and β with a whole-number crossover, so that both sides of the tie are exact in floating point:
# p = 4: (6 - 2) 4 / ((2 - 1.5) 0.5) = 64 bytes; p = 8: (14 - 3) 1.25 / ((3 - 1.75) 1) = 11 bytes.
EXACT_TIES = [(64.0, 4, 4.0, 0.5), (11.0, 8, 1.25, 1.0)]


def _choice_cases(rng, hidden: bool) -> list[tuple]:
    if not hidden:
        return [(1024, 8, *IB), (1 << 30, 8, *IB), (1 << 20, 3, *NVLINK), EXACT_TIES[0]]
    cases = list(EXACT_TIES) + [(1 << 20, 1, *IB), (1, 2, *IB), (1 << 34, 2, *IB)]  # p = 1: a tie; p = 2: never ring
    for p in (3, 4, 5, 6, 7, 8, 12, 16, 64, int(rng.integers(9, 200))):
        alpha, beta = (IB, NVLINK)[int(rng.integers(2))]
        alpha *= float(rng.uniform(0.5, 2))
        crossover = cost.crossover("all_reduce", "ring", "recursive_doubling", p, alpha, beta)
        cases += [(round(crossover * f), p, alpha, beta) for f in (0.999, 1.001, 0.1, 10)]
        cases += [(int(10 ** rng.uniform(0, 10)), p, alpha, beta)]
    return cases


@check(points=2)
def choose_algorithm(student, rng, hidden):
    """choose_algorithm(nbytes, world_size, alpha, beta) picks the faster of ring and recursive doubling (tie: ring)."""
    cases = _choice_cases(rng, hidden)
    for i, (nbytes, p, alpha, beta) in enumerate(cases, 1):
        call = (f"choose_algorithm(nbytes={nbytes}, world_size={p}, alpha={alpha:.6g}, beta={beta:.6g})"
                if not redacting() else  # the four numbers are the hidden case
                f"choose_algorithm(nbytes={describe(nbytes)}, world_size={describe(p)}, alpha={describe(alpha)}, "
                f"beta={describe(beta)})")
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {call}"
        got = student.call("choose_algorithm", nbytes, p, alpha, beta, returns="string")
        expected = tree.choose_algorithm(nbytes, p, alpha, beta, PAIR)
        if got == expected:
            continue
        ring, doubling = (cost.time("all_reduce", a, nbytes, p, alpha, beta) for a in PAIR)
        crossover = cost.crossover("all_reduce", "ring", "recursive_doubling", p, alpha, beta)
        why = (f"the ring takes {ring:.6g} s and recursive doubling {doubling:.6g} s"
               + (" (a tie goes to the ring)" if ring == doubling else "")
               + (f"; they cross at {crossover:.6g} bytes, below which recursive doubling is faster"
                  if crossover is not None else ""))
        hint = ""
        if got not in PAIR:
            hint = f" Return one of {PAIR}."
        elif p & (p - 1):
            steps = cost.terms('all_reduce', 'recursive_doubling', 0, p)[0]
            hint = (unredacted(f" For p = {p}, not a power of two,", " Where p is not a power of two,")
                    + " recursive doubling takes floor(log2 p) + 2" + unredacted(f" = {steps}")
                    + " steps, each moving the whole tensor: the fold adds one step before the rounds and one after.")
        if redacting():  # the answer, the student's, and the times that decide them are the hidden case's
            raise CheckFailure(f"{label}: differs from the reference, which picks the algorithm of the smaller α-β "
                               f"time for this case (a tie goes to the ring).{hint}")
        raise CheckFailure(f"{label}: expected {expected!r}, got {got!r}: {why}.{hint}")
