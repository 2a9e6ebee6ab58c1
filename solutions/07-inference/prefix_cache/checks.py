"""Checks: a radix-tree prefix cache with LRU eviction of leaves, locks, hit rate.

The class is graded through the notebook's driver `run_operations(ops, capacity)`: the same list of
operations runs on the student's cache and on the reference's, and after every operation the
check compares what it returned, which sequences it evicted (in order), the tokens on the tree's
edges and the cached sequences. The first difference fails the check, with the operations up to it
(short enough to paste back into `run_operations`) and the likely mistake. Random operations use a
three-token alphabet, so that sequences share prefixes and edges split all the time.
"""

from aisys.inference.prefix_cache import RadixCache, hit_rate as reference_hit_rate, run_operations, \
    synthetic_workload

from aisys_grader.checks import check
from aisys_grader.compare import CheckFailure, assert_close, describe, raised, unredacted

BIG = 10**6  # a capacity that never fills


def _cache_problem(student, workload: list, capacity: int) -> str:
    """hit_rate builds on RadixCache: if the student's runs this workload's match-then-insert differently, say so."""
    ops = [[name, prompt] for prompt in workload for name in ("match", "insert")]
    try:
        _compare_runs(student, ops, capacity, "")
    except CheckFailure:
        return (": your RadixCache does not run this workload's match and insert as the reference does (see the "
                "checks radix_tree and lru_eviction), and hit_rate builds on it: fix it first")
    return ""


# ---------------------------------------------------------------------------------------------- comparing runs

def _shown(op) -> str:
    return f"{op[0]}({describe(op[1])})"


def _hint(op, field: str, expected: dict, got: dict) -> str:
    """The mistake that most often gives this difference."""
    name = op[0]
    if field == "result" and name in ("match", "lock") and isinstance(got["result"], int):
        if got["result"] < expected["result"]:
            return ("a lookup that stops inside an edge still matches the tokens of that edge that agree (and splits "
                    "the node there): count them")
        return "the matched length is the longest prefix of the tokens that some cached sequence starts with"
    if field == "result" and name == "evict":
        return ("evict removes the unlocked leaf (lock == 0) with the smallest last_access, again and again; an access "
                "stamps every node of its path, lock and unlock count on every node of theirs, and _split gives the "
                "upper part the node's last_access and lock")
    if field == "result" and name == "insert":
        return ("insert returns the tokens it newly stored: those after the cached prefix, as many as fit after "
                "evicting (with the path being extended protected)")
    if field == "evicted":
        cached_after = expected["sequences"]
        for sequence in got["evicted"]:
            if any(len(s) > len(sequence) and s[:len(sequence)] == sequence for s in cached_after):
                return (f"you evicted {describe(sequence)}, the prefix of a sequence that stays cached: only leaves "
                        "are evicted, an inner node is part of every sequence below it")
        if sorted(got["evicted"]) == sorted(expected["evicted"]):
            return "the right leaves in the wrong order: the one with the smallest last_access goes first"
        if name == "insert" and len(got["evicted"]) > len(expected["evicted"]):
            return "insert evicts only the tokens that are missing, and never the path it extends"
        return ("the least recently used unlocked leaf goes first; match, insert and lock stamp every node of their "
                "path (only the matched part of a split edge), and a locked node is never evicted")
    if field in ("cached", "sequences"):
        return ("every cached token sits on exactly one edge: an insert adds one leaf with the unmatched rest, under "
                "the node where the lookup ended, splitting an edge where it stops inside it")
    return ""


def _compare_runs(student, ops: list, capacity: int, label: str) -> None:
    expected = run_operations(ops, capacity)
    got = student.call("run_operations", ops, capacity, returns="list")
    where = f"{label}{unredacted(f', capacity {capacity}')}"  # the capacity and the operations are the hidden case
    for i, (mine, theirs) in enumerate(zip(got, expected)):
        replay = unredacted(f" Replay: run_operations({ops[:i + 1]!r:.400}, {capacity})")
        if not isinstance(mine, dict) or "error" in mine:
            error = raised(mine.get("error")) if isinstance(mine, dict) else f"gave {describe(mine)}"
            raise CheckFailure(f"{where}: {_shown(ops[i])} (op {i + 1} of {len(ops)}) raised {error}.{replay}")
        for field in ("result", "evicted", "cached", "sequences"):
            if mine.get(field) != theirs[field]:
                hint = _hint(ops[i], field, theirs, mine)
                differs = unredacted(f"expected {describe(theirs[field])}, got {describe(mine.get(field))}",
                                     "differs from the reference")
                raise CheckFailure(f"{where}: after {_shown(ops[i])} (op {i + 1} of {len(ops)}), {field}: {differs}"
                                   f"{': ' + hint if hint else ''}.{replay}")
    if len(got) != len(expected):
        raise CheckFailure(f"{where}: run_operations reported {len(got)} operations of {len(ops)}")


def _run_cases(student, cases: list, hidden: bool) -> None:
    for i, (ops, capacity) in enumerate(cases, 1):
        _compare_runs(student, ops, capacity, f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}")


def _tokens(rng, longest: int = 8, alphabet: int = 3) -> list[int]:
    return rng.integers(0, alphabet, int(rng.integers(0, longest + 1))).tolist()


def _random_ops(rng, capacity: int, count: int, *, kinds: tuple) -> list:
    """Random operations; unlocks release a prefix that an earlier lock returned (found with the reference)."""
    cache, held, ops = RadixCache(capacity), [], []
    while len(ops) < count:
        kind = str(rng.choice(kinds))
        if kind == "evict":
            op = ["evict", int(rng.integers(0, 6))]
        elif kind == "unlock":
            if not held:
                continue
            op = ["unlock", held.pop(int(rng.integers(len(held))))]
        else:
            op = [kind, _tokens(rng)]
        result = getattr(cache, op[0])(op[1])
        if kind == "lock":
            held.append(op[1][:result])
        ops.append(op)
    return ops


# ---------------------------------------------------------------------------------------------- the tree

TREE_VISIBLE = [
    ([["insert", [1, 2, 3, 4, 5]], ["match", [1, 2, 3]], ["insert", [1, 2, 3, 9, 9]], ["match", [1, 2, 3, 9]],
      ["insert", [1, 2]], ["match", [7]], ["insert", [7, 8]], ["match", [1, 2, 3, 4, 5, 6]]], BIG),
]
TREE_HIDDEN = [
    ([["match", []], ["insert", []], ["match", [1]], ["insert", [1]], ["match", [1]], ["match", []]], BIG),
    ([["insert", [4, 4, 4]], ["insert", [4, 4, 4]], ["insert", [4, 4]], ["match", [4, 4, 4, 4]]], BIG),  # no growth
    ([["insert", [1, 2, 3, 4]], ["match", [1, 2]], ["insert", [1, 2, 3]], ["insert", [1, 5]],  # splits, twice
      ["match", [1, 2, 3, 4]], ["match", [1, 5, 5]]], BIG),
    ([["insert", [1, 2]], ["insert", [1, 2, 3, 4]], ["insert", [1, 2, 3, 4, 5]], ["match", [1, 2, 3, 4, 5, 6]]], BIG),
    ([["insert", [0, 1, 2, 3, 4, 5, 6, 7]], ["insert", [0, 1, 2, 3, 9]], ["insert", [0, 1, 8]], ["insert", [0, 7]],
      ["match", [0, 1, 2, 3, 4, 5]], ["match", [0, 1, 2, 3, 9, 9]], ["match", [2]]], BIG),
]


@check(points=3)
def radix_tree(student, rng, hidden):
    """match and insert find the longest cached prefix and store each token once, splitting edges where lookups stop."""
    cases = TREE_VISIBLE
    if hidden:
        cases = TREE_HIDDEN + [(_random_ops(rng, BIG, 25, kinds=("insert", "insert", "match")), BIG)
                               for _ in range(4)]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- eviction

LRU_VISIBLE = [
    ([["insert", [1, 1, 1]], ["insert", [2, 2, 2]], ["match", [1, 1, 1]], ["insert", [3, 3, 3]],
      ["insert", [1, 1, 4, 4]], ["evict", 2]], 8),
]
LRU_HIDDEN = [
    ([["insert", [1, 2, 3]], ["insert", [1, 2, 3, 4, 5]], ["insert", [7]], ["evict", 4]], 5),  # a chain: leaf first
    ([["insert", [1, 1]], ["insert", [2, 2]], ["insert", [3, 3]], ["match", [1, 5]], ["insert", [4]]], 6),  # partial
    ([["insert", [1, 1]], ["insert", [2, 2]], ["match", [1, 1]], ["insert", [3, 3]], ["insert", [4, 4]]], 6),  # refresh
    ([["insert", [1, 2, 3, 4, 5]], ["match", [1, 2, 3, 4, 5]], ["insert", [2, 2]]], 3),  # larger than the capacity
    ([["insert", [1, 2]], ["match", [1, 2]], ["evict", 1]], 0),  # capacity 0
    ([["insert", [1, 2]], ["insert", [3, 4]], ["insert", [3, 4]], ["evict", 0]], 4),  # exactly full: nothing goes
    ([["insert", [1, 2]], ["insert", [3, 4]], ["insert", [3, 4, 5, 6, 7]]], 4),  # the extended prefix is protected
    ([["insert", [1, 2, 3]], ["insert", [1, 2, 4]], ["insert", [5]], ["evict", 100], ["insert", [1]]], 6),  # all
    ([["insert", [1, 2, 3]], ["insert", [1, 4]], ["insert", [1, 5, 5]], ["match", [1, 4]], ["insert", [2, 2, 2, 2]],
      ["match", [1, 4]]], 7),  # evicting two leaves, then their parent is kept for the refreshed [1, 4]
]


@check(points=3)
def lru_eviction(student, rng, hidden):
    """evict removes whole unlocked leaves, least recently used first; insert evicts only what it must and fits."""
    cases = LRU_VISIBLE
    if hidden:
        cases = LRU_HIDDEN + [(_random_ops(rng, capacity, 30, kinds=("insert", "insert", "match", "evict")), capacity)
                              for capacity in (int(rng.integers(1, 6)), int(rng.integers(4, 12)),
                                               int(rng.integers(8, 16)), int(rng.integers(8, 16)))]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- locks

LOCK_VISIBLE = [
    ([["insert", [1, 2, 3]], ["lock", [1, 2, 3, 9]], ["insert", [4, 5, 6]], ["insert", [7, 8]],
      ["unlock", [1, 2, 3]], ["insert", [9, 9, 9]]], 6),
]
LOCK_HIDDEN = [
    ([["insert", [1, 2, 3]], ["lock", [1, 2, 3]], ["insert", [5, 6, 7]], ["evict", 10]], 4),  # what fits, no more
    ([["insert", [1, 2, 3, 4]], ["lock", [1, 2]], ["insert", [5, 5]], ["evict", 10], ["unlock", [1, 2]],
      ["evict", 10]], 6),  # a lock that ends mid-edge splits it: the part below can go
    ([["insert", [1, 2]], ["lock", [1, 2]], ["lock", [1, 2]], ["unlock", [1, 2]], ["evict", 5], ["unlock", [1, 2]],
      ["evict", 5]], 4),  # locked twice: still locked after one unlock
    ([["insert", [1, 2]], ["lock", [3, 3]], ["unlock", []], ["insert", [3, 3, 3]], ["lock", [1, 2, 2]],
      ["insert", [4, 4]], ["evict", 9]], 5),  # a lock of nothing; an older locked leaf is skipped
    ([["insert", [1, 1, 1]], ["lock", [1, 1, 1]], ["insert", [1, 1, 1, 2, 2]], ["insert", [3, 3]]], 5),
    ([["insert", [1, 1]], ["insert", [2, 2]], ["lock", [1, 1]], ["unlock", [1, 1]],
      ["insert", [3, 3]]], 4),  # an access
    ([["insert", [1, 2]], ["lock", [1, 2]], ["unlock", [1, 2]], ["insert", [1, 2, 3, 4]]], 3),  # insert locks its path
    ([["insert", [1, 2, 3]], ["lock", [1, 2, 3]], ["match", [1]], ["unlock", [1, 2, 3]], ["evict", 10]],
     100),  # a locked node split by a match: both parts locked, both unlocked
    ([["insert", [1, 2]], ["insert", [1, 2, 3]], ["insert", [5]], ["lock", [5]], ["match", [1, 2, 3]], ["evict", 1],
      ["unlock", [5]], ["evict", 1]], 100),  # [1, 2], a leaf again, was used by the match, after [5]
    ([["insert", [1]], ["insert", [2]], ["insert", [3]], ["lock", [3]], ["insert", [4, 4, 4]], ["unlock", [3]]],
     5),  # insert evicts the one token missing, not three
]


@check(points=2)
def locks(student, rng, hidden):
    """A locked prefix is never evicted; unlock makes it evictable again; a full, locked cache stores what fits."""
    cases = LOCK_VISIBLE
    if hidden:
        kinds = ("insert", "insert", "match", "lock", "lock", "unlock", "evict")
        cases = LOCK_HIDDEN + [(_random_ops(rng, capacity, 30, kinds=kinds), capacity)
                               for capacity in (int(rng.integers(2, 8)), int(rng.integers(6, 14)),
                                                int(rng.integers(6, 14)), int(rng.integers(10, 20)))]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- hit rate

def _workload(rng, requests: int) -> list:
    return synthetic_workload(requests, seed=int(rng.integers(2**31)), num_system_prompts=int(rng.integers(1, 4)),
                              system_prompt_len=int(rng.integers(5, 40)), num_examples=2, example_len=10,
                              message_len=(0, 15), answer_len=(1, 20), follow_up=float(rng.uniform(0, 0.8)),
                              vocab_size=1000)


def _requests_with_a_hit(workload, capacity: int) -> float:
    """The typical wrong hit rate: the share of requests that found anything cached."""
    cache, found = RadixCache(capacity), 0
    for prompt in workload:
        found += cache.match(prompt) > 0
        cache.insert(prompt)
    return found / len(workload)


HIT_VISIBLE = [
    {"workload": [[1, 2, 3, 4], [1, 2, 7, 7], [1, 2, 3, 4]], "capacity": 100},  # 0 + 2 + 4 of 12 tokens
    {"workload": [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [1], [5, 6]], "capacity": 5},
]


@check(points=2)
def hit_rate(student, rng, hidden):
    """hit_rate(workload, capacity): cached prompt tokens found over all prompt tokens, each prompt matched then
    inserted."""
    cases = HIT_VISIBLE
    if hidden:
        cases = [{"workload": [], "capacity": 10}, {"workload": [[], [1], []], "capacity": 10},
                 {"workload": [[3, 3, 3]] * 4, "capacity": 0}, {"workload": [[3, 3, 3]] * 4, "capacity": 2},
                 {"workload": [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9, 9], [1, 2, 4]], "capacity": 9},
                 {"workload": [[1, 1], [2, 2], [1, 1], [3, 3], [1, 1]], "capacity": 4},  # a hit keeps [1, 1]
                 {"workload": [[1], [2], [3], [4], [5], [6, 6, 6], [3]], "capacity": 6}]  # evict 2 tokens, not 3
        for _ in range(3):
            workload = _workload(rng, int(rng.integers(10, 60)))
            total = sum(map(len, workload))
            cases += [{"workload": workload, "capacity": int(total * share)} for share in (0.05, 0.3, 2.0)]
    for i, case in enumerate(cases, 1):
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}"
        shown = f"hit_rate(workload={describe(case['workload'])}, capacity={describe(case['capacity'])})"
        expected = reference_hit_rate(**case)
        got = student.call("hit_rate", returns="number", **case)
        try:
            assert_close(got, expected, rtol=1e-12, atol=1e-12)
        except CheckFailure as failure:
            hint = ""
            if case["workload"] and abs(got - _requests_with_a_hit(**case)) < 1e-12:
                hint = (": that is the share of requests with a hit; count tokens: the tokens found over all prompt "
                        "tokens")
            else:
                hint = _cache_problem(student, case["workload"], case["capacity"])
            raise CheckFailure(f"{label}: {shown}: {failure}{hint}") from None
