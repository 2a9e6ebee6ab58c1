"""Checks: activation checkpointing on a chain, graded against aisys.autograd.recompute and torch.

The simulator is compared with the reference's on fixed plans (every rule of the notebook decides one of them)
and random chains; Chen's rule and the least feasible budget with the reference's. Every plan the student's
planner returns is run in the grader's simulator: it must fit the budget and recompute exactly the least that
brute force over all 2^(n-1) plans finds (up to 14 layers), on fixed chains where keeping the largest layers,
evenly spaced checkpoints and counting layers instead of their cost all lose, and on random ones. A budget below
the least is refused with a ValueError naming it. Last, the student's plan for a chain of torch Linear layers runs
under torch.utils.checkpoint, and the student's simulator must predict the saved bytes measured with saved-tensor
hooks to the byte. Everything is an exact int: no tolerance anywhere.
"""

from functools import lru_cache

import numpy as np

from aisys.autograd import recompute

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, raised, shown, unredacted

KEYS = ("peak", "recompute", "held")


def _is_int(value) -> bool:
    """An exact integer (a float such as 13.0 is refused: byte counts and costs are ints, and NaN is no number)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _chain(rng, n: int, high: int = 100) -> tuple[list[int], list[int]]:
    return rng.integers(1, high, n).tolist(), rng.integers(0, high, n).tolist()


@lru_cache(maxsize=256)
def _brute(a: tuple, c: tuple, budget: int) -> int:
    """The least recomputation of any plan within budget (cached: every known-wrong answer meets the same cases)."""
    return recompute.brute_force(list(a), list(c), budget)[0]


def _simulated(got, expected, case) -> None:
    if not isinstance(got, dict):
        raise CheckFailure(f"simulate should return a dict with keys {KEYS}, got {shown(type(got).__name__)}")
    for key in KEYS:
        value = got.get(key)
        if not _is_int(value):
            raise CheckFailure(f"its {key!r} should be an int, got {shown(value, '!r')}")
        if value != expected[key]:
            raise CheckFailure(f"its {key!r} is {shown(value)}, expected " + unredacted(f"{expected[key]}", "another"))


def _simulate_hint(case, got, expected) -> str:
    if not isinstance(got, dict):
        return ""
    a, plan = case["a"], case["plan"]
    if got.get("peak") == expected["held"] != expected["peak"]:
        return ("That is what the forward pass holds: while a segment runs backward, every activation its rerun "
                "saved is alive at once, on top of the checkpoints before it.")
    if got.get("peak") == expected["peak"] - a[0] or got.get("held") == expected["held"] - a[0]:
        return "Layer 0's input is a checkpoint like any other: its a[0] bytes are held until the very end."
    rerun_first = sum(case["c"][j] for j, k in recompute.segments(len(a), plan) if k > j)
    if got.get("recompute") == expected["recompute"] - rerun_first:
        return ("A checkpoint holds its layer's input, not its output: rerunning a segment starts with the "
                "checkpoint's own layer.")
    return ""


@check(points=2)
def simulate(student, rng, hidden):
    """simulate(a, c, plan) gives the reference's peak, recomputation and bytes held after the forward pass."""
    a, c = [4, 1, 2, 8, 1], [1, 2, 3, 4, 5]
    cases = [{"a": a, "c": c, "plan": plan} for plan in
             ([0, 3], [0, 1, 2, 3, 4], [0], [3], [4, 0, 2], [0, 1, 3])]  # [3]: layer 0 is a checkpoint anyway
    cases += [{"a": [7], "c": [3], "plan": [0]}, {"a": [5, 5, 0, 9], "c": [0, 2, 2, 9], "plan": [0, 2]}]
    if hidden:
        cases = []
        for _ in range(12):
            n = int(rng.integers(1, 15))
            a, c = _chain(rng, n, 1000)
            plan = [0] + [j for j in range(1, n) if rng.random() < 0.4]
            cases.append({"a": a, "c": c, "plan": plan})
    compare_cases(student, "simulate", cases, lambda a, c, plan: {
        key: value for key, value in recompute.simulate(a, c, plan).items() if key in KEYS},
        returns="mapping", hidden=hidden, compare=_simulated, hint=_simulate_hint)


@check(points=1)
def sqrt_plan(student, rng, hidden):
    """sqrt_plan(n) is [0, s, 2s, ...] below n with s = ceil(sqrt(n))."""
    cases = [{"n": n} for n in (1, 2, 9, 10, 16, 17)]
    if hidden:
        cases = [{"n": int(n)} for n in rng.integers(1, 400, 8)] + [{"n": 99 ** 2}, {"n": 99 ** 2 + 1}]
    compare_cases(student, "sqrt_plan", cases, lambda n: recompute.sqrt_plan(n), returns="list", hidden=hidden,
                  hint=lambda case, got, expected: "s is ceil(sqrt(n)) (math.isqrt(n - 1) + 1), not round or floor."
                  if isinstance(got, list) and len(got) != len(expected) else "")


@check(points=1)
def least_budget(student, rng, hidden):
    """least_budget(a) is the least peak over all plans."""
    cases = [{"a": [2, 2, 2, 2]}, {"a": [1] * 9}, {"a": [9]}, {"a": [1, 50, 1, 1, 50, 1, 1]},
             {"a": [0, 0, 3, 0]}, {"a": [10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}]
    if hidden:
        cases = [{"a": _chain(rng, int(rng.integers(1, 15)), 1000)[0]} for _ in range(8)]
    compare_cases(student, "least_budget", cases, lambda a: recompute.least_budget(a), returns="number",
                  hidden=hidden, compare=_exact_int,
                  hint=lambda case, got, expected: "Chen's sqrt(n) rule does not reach the least peak."
                  if got == recompute.simulate(case["a"], [0] * len(case["a"]), recompute.sqrt_plan(len(case["a"]))
                                               )["peak"] != expected else "")


def _exact_int(got, expected, case) -> None:
    if not _is_int(got):
        raise CheckFailure(f"the result should be an int, got {shown(got, '!r')}")
    if got != expected:
        raise CheckFailure(f"got {shown(got)}, expected " + unredacted(f"{expected}", "another value"))


# Chains where the simple rules lose: (a, c, budget). Deciding cases, in every run.
UNEVEN = [
    ([1, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 50], 5),  # the sqrt rule's peak, but keep the costly layer
    ([1, 8, 1, 1, 8, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1], 13),  # keeping the largest activations is the wrong way round
    ([2, 2, 2, 2, 2, 2, 2, 2, 2, 2], [1, 1, 1, 1, 30, 30, 1, 1, 1, 1], 10),  # the costly pair alone
    ([5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [9, 1, 9, 1, 9, 1, 9, 1, 9, 1, 9, 1, 9, 1], 12),  # 14 layers
]


def _judge_plan(plan, a, c, budget, where: str) -> None:
    n = len(a)
    if not (isinstance(plan, list) and all(_is_int(j) for j in plan)):
        raise CheckFailure(f"{where}: the plan should be a list of ints, got {shown(plan, '!r')}")
    if plan != sorted(set(plan)) or not plan or plan[0] != 0 or plan[-1] >= n:
        raise CheckFailure(f"{where}: the plan should be sorted distinct layers in [0, n) starting with 0, got "
                           + shown(plan))
    ran = recompute.simulate(a, c, plan)
    if ran["peak"] > budget:
        raise CheckFailure(f"{where}: the plan " + unredacted(f"{plan} peaks at {ran['peak']} bytes", "peaks")
                           + " above the budget (in the grader's simulator)")
    least = _brute(tuple(a), tuple(c), budget)
    if ran["recompute"] != least:
        raise CheckFailure(f"{where}: the plan " + unredacted(f"{plan} recomputes {ran['recompute']}",
                                                              "recomputes more")
                           + unredacted(f"; the least within the budget, over all {2 ** (n - 1)} plans, is {least}",
                                        " than the least within the budget, over all plans")
                           + " (the cost c, not the number of layers, is what is minimised)")


@check(points=3)
def plan_checkpoints(student, rng, hidden):
    """Every plan fits the budget in the grader's simulator and recomputes the least that brute force finds; a
    budget of least_budget(a) is accepted, and one of sum(a) keeps every layer with no recomputation."""
    cases = list(UNEVEN) + [([4, 1, 2, 8, 1], [1, 2, 3, 4, 5], 14), ([3], [4], 3)]
    if hidden:
        cases = []
        for _ in range(6):
            a, c = _chain(rng, int(rng.integers(2, 15)), 1000)
            least = recompute.least_budget(a)
            cases.append((a, c, int(rng.integers(least, sum(a) + 1))))
        a, c = _chain(rng, 14, 1000)
        cases.append((a, c, recompute.least_budget(a)))
    for i, (a, c, budget) in enumerate(cases, 1):
        where = f"{'hidden case' if hidden else 'case'} {i}: plan_checkpoints" + unredacted(
            f"(a={a}, c={c}, budget={budget})", "(the hidden case)")
        _judge_plan(student.call("plan_checkpoints", a, c, budget, returns="list"), a, c, budget, where)
    for i, (a, c, _) in enumerate(cases[:3], 1):  # the least budget, and room for everything
        for budget in (recompute.least_budget(a), sum(a)):
            where = f"{'hidden case' if hidden else 'case'} {i}, budget " + unredacted(
                f"{budget}", "(least or all)") + ": plan_checkpoints"
            plan = student.call("plan_checkpoints", a, c, budget, returns="list")
            _judge_plan(plan, a, c, budget, where)
            if budget == sum(a) and min(c) > 0 and plan != list(range(len(a))):
                raise CheckFailure(f"{where}: with room for every activation the plan should keep every layer")


@check(points=1)
def budget_refused(student, rng, hidden):
    """A budget below least_budget(a) raises ValueError whose message names `budget` and the least budget."""
    cases = [([2, 2, 2, 2], [1, 1, 1, 1], 5), ([1] * 9, [1] * 9, 3), ([9], [1], 8), ([3, 1, 4, 1, 5], [0] * 5, 0)]
    if hidden:
        for _ in range(3):
            a, c = _chain(rng, int(rng.integers(1, 15)), 1000)
            cases.append((a, c, int(rng.integers(0, recompute.least_budget(a)))))
    for a, c, budget in cases:
        least = recompute.least_budget(a)
        call = "plan_checkpoints" + unredacted(f"(a={a}, c={c}, budget={budget})", "(a hidden case)")
        got = student.call("refusal", a, c, budget, returns="any")
        if got is None:
            raise CheckFailure(f"{call} returned a plan, but its budget is below the least feasible budget "
                               + unredacted(f"{least}", "") + ": it should raise ValueError")
        if got[0] != "ValueError":
            raise CheckFailure(f"{call} raised {raised(got[1])}, not ValueError")
        words = str(got[1]).replace(",", " ").replace(":", " ").replace("(", " ").replace(")", " ").split()
        if "budget" not in str(got[1]) or str(least) not in words:
            raise CheckFailure(f"{call} raised ValueError, but its message should name `budget` and give the least "
                               "feasible budget " + unredacted(f"({least}) as an integer; it says {got[1]!r}",
                                                               "as an integer"))


# Chains of float64 Linear layers (features per layer boundary) and how far above the least budget to plan.
TORCH_CHAINS = [([8, 16, 4, 32, 8, 8, 2], 0.0), ([6, 24, 24, 3, 12, 40, 5, 9, 2], 0.3)]
FIXED_PLANS = ([0], [0, 2, 3])  # plans whose peak is reached while a long segment reruns, above what is held


@check(points=1)
def torch_measured(student, rng, hidden):
    """The student's simulate predicts, to the byte and FLOP, what torch.utils.checkpoint holds and reruns for the
    student's own plan (and two fixed ones), measured under saved-tensor hooks."""
    chains = list(TORCH_CHAINS)
    if hidden:
        chains = [(rng.integers(2, 40, int(rng.integers(5, 10))).tolist(), float(rng.uniform(0, 1)))]  # n >= 4 layers
    for widths, above in chains:
        a, c = recompute.measure(widths)["a"], recompute.chain_costs(widths, 4)
        # a budget every plan rule fits (Chen's too), so that this check judges the prediction, not the plan
        floor = recompute.simulate(a, c, recompute.sqrt_plan(len(a)))["peak"]
        budget = floor + int(above * (sum(a) - floor))
        plan = student.call("plan_checkpoints", a, c, budget, returns="list")
        where = f"the chain of Linear layers {shown(widths)} (a = {shown(a)} bytes)"
        if not (isinstance(plan, list) and all(_is_int(j) and 0 <= j < len(a) for j in plan)
                and len(set(plan)) == len(plan)):
            raise CheckFailure(f"{where}, budget {shown(budget)}: plan_checkpoints returned {shown(plan, '!r')}, "
                               "not a list of distinct layers")
        for tried in [plan, *FIXED_PLANS]:
            measured = recompute.measure(widths, tried)
            predicted = student.call("simulate", a, c, tried, returns="mapping")
            for key, unit in (("peak", "bytes"), ("held", "bytes"), ("recompute", "FLOPs")):
                # exact: torch saves exactly the tensors the model counts, and FLOPs of reruns are whole numbers
                if not _is_int(predicted.get(key)) or predicted[key] != measured[key]:
                    raise CheckFailure(f"{where}: for the plan {shown(tried)} your simulate predicts {key} "
                                       f"{shown(predicted.get(key))}, torch.utils.checkpoint measured "
                                       + unredacted(f"{measured[key]} {unit}", "another value")
                                       + " (saved-tensor hooks, one count per storage)")
