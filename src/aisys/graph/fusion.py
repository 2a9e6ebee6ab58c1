"""Fusion as a partition of a graph's computed nodes into groups (one kernel each): legality, bytes, search.

Legality of `groups` (a list of lists of node names), the rule `check_fusion` enforces:
  1. every computed node (kind other than "input") is in exactly one group; inputs and constants are in none;
  2. the groups, with an edge from the group of a producer to the group of each consumer, form no cycle (no path
     leaves a group and comes back into it: the group could not run as one kernel before and after another);
  3. a group holds at most one "anchor", a reduction or a matmul, and
       with no anchor, every node is elementwise and all have the same shape (horizontal fusion of siblings included);
       with a reduction, every other node is elementwise with the reduction's input shape and reaches the reduction
         through nodes of the group (a prologue: producers fused into the reduction; no epilogue after it);
       with a matmul, every other node is elementwise with the matmul's output shape and is reached from the matmul
         through nodes of the group (an epilogue; no prologue, and never two matmuls).
  This is close to what TorchInductor and XLA fuse by default, simplified: both also fuse some reduction epilogues.

Bytes moved by a grouping: for each group, the bytes of the distinct values it reads from outside itself (a value
read by two nodes of the group is read once; read by two groups, once by each), plus the bytes of the values it
computes that a node outside the group reads or that are graph outputs (each written once). Constants are literals
in the kernel's code: 0 bytes. Values used only inside their group stay in registers: 0 bytes.
"""

import itertools

import numpy as np

from . import ir


def computed(graph: dict) -> list[str]:
    """Names of the nodes a kernel computes (every kind but "input"), in topological order."""
    by_name = ir.nodes_by_name(graph)
    return [n for n in ir.topological(graph) if ir.kind(by_name[n]) != "input"]


def _group_of(graph, groups) -> dict:
    return {name: g for g, group in enumerate(groups) for name in group}


def check_fusion(graph: dict, groups) -> None:
    """None if `groups` is a legal fusion of `graph` (the module's rule); ValueError naming `groups` and the first
    violation otherwise: its message says "unknown", "duplicate", "missing", "mix" or "cycle"."""
    ir.validate(graph)
    by_name = ir.nodes_by_name(graph)
    if not isinstance(groups, list) or not all(isinstance(g, list) and g for g in groups):
        raise ValueError(f"groups: expected a list of non-empty lists of node names, got {groups!r}")
    seen = set()
    for group in groups:
        for name in group:
            if name not in by_name or ir.kind(by_name[name]) == "input":
                raise ValueError(f"groups: unknown node {name!r}: not a computed node of the graph")
            if name in seen:
                raise ValueError(f"groups: duplicate: node {name!r} is in two groups (or twice in one)")
            seen.add(name)
    missing = [n for n in computed(graph) if n not in seen]
    if missing:
        raise ValueError(f"groups: missing: node {missing[0]!r} is in no group")
    for group in groups:
        why = illegal_mix(graph, group)
        if why:
            raise ValueError(f"groups: illegal mix of ops in {sorted(group)}: {why}")
    cycle = group_cycle(graph, groups)
    if cycle:
        raise ValueError(f"groups: cycle between groups: {' -> '.join(str(sorted(groups[g])) for g in cycle)}")


def is_legal(graph: dict, groups) -> bool:
    try:
        check_fusion(graph, groups)
    except ValueError:
        return False
    return True


def illegal_mix(graph: dict, group: list) -> str:
    """Why the nodes of `group` cannot be one kernel ("" if they can): rule 3 of the module."""
    by_name = ir.nodes_by_name(graph)
    members = set(group)
    anchors = [n for n in group if ir.kind(by_name[n]) in ("reduction", "matmul")]
    if len(anchors) > 1:
        return f"two reductions or matmuls ({anchors[0]!r} and {anchors[1]!r}) in one kernel"
    others = [n for n in group if n not in anchors]
    if not anchors:
        shapes = {tuple(by_name[n]["shape"]) for n in others}
        return "" if len(shapes) == 1 else f"elementwise nodes of different shapes {sorted(map(list, shapes))}"
    anchor = by_name[anchors[0]]
    users = ir.consumers(graph)

    def reaches(start, goal, step):  # a path start -> goal through members, following `step`
        todo, seen = [start], set()
        while todo:
            here = todo.pop()
            for nxt in step(here):
                if nxt == goal:
                    return True
                if nxt in members and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    if anchor["kind"] == "reduction":
        shape = by_name[anchor["inputs"][0]]["shape"]
        for n in others:
            if by_name[n]["shape"] != shape or not reaches(n, anchor["name"], lambda x: users[x]):
                return (f"{n!r} is not a producer of the reduction {anchor['name']!r} on its input shape "
                        "(a reduction fuses with a prologue only)")
        return ""
    for n in others:
        if by_name[n]["shape"] != anchor["shape"] or not reaches(anchor["name"], n, lambda x: users[x]):
            return (f"{n!r} is not an epilogue of the matmul {anchor['name']!r} on its output shape "
                    "(a matmul fuses with an epilogue only)")
    return ""


def group_cycle(graph: dict, groups) -> list[int]:
    """A cycle of group indices in the graph of groups ([] if none)."""
    where = _group_of(graph, groups)
    edges = {g: set() for g in range(len(groups))}
    for n in graph["nodes"]:
        for i in n["inputs"]:
            if i in where and n["name"] in where and where[i] != where[n["name"]]:
                edges[where[i]].add(where[n["name"]])
    state, stack = {}, []

    def visit(g):
        state[g] = "open"
        stack.append(g)
        for h in sorted(edges[g]):
            if state.get(h) == "open":
                return stack[stack.index(h):] + [h]
            if h not in state:
                found = visit(h)
                if found:
                    return found
        state[g] = "done"
        stack.pop()
        return []

    for g in range(len(groups)):
        if g not in state:
            found = visit(g)
            if found:
                return found
    return []


def reads_and_writes(graph: dict, group: list) -> tuple[list[str], list[str]]:
    """(values the group reads from memory, values it writes), each in graph order: the kernel's arguments."""
    by_name, users, members = ir.nodes_by_name(graph), ir.consumers(graph), set(group)
    outputs = set(graph.get("outputs", []))
    order = ir.topological(graph)
    reads = {i for n in group for i in by_name[n]["inputs"] if i not in members and by_name[i]["op"] != "constant"}
    writes = {n for n in group if n in outputs or any(u not in members for u in users[n])}
    return [n for n in order if n in reads], [n for n in order if n in writes]


def bytes_moved(graph: dict, groups) -> int:
    """Bytes the grouping moves to and from memory (the module's count)."""
    by_name = ir.nodes_by_name(graph)
    total = 0
    for group in groups:
        reads, writes = reads_and_writes(graph, group)
        total += sum(ir.value_bytes(by_name[n]) for n in reads + writes)
    return total


def partitions(items: list):
    """Every partition of `items` into non-empty groups (Bell(len(items)) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def optimal_fusion(graph: dict, limit: int = 10) -> list[list[str]]:
    """A legal grouping with the fewest bytes moved, by exhaustive search (ties: fewest groups, then the first
    found); ValueError naming `graph` beyond `limit` computed nodes (Bell(10) is 115975 partitions)."""
    ir.validate(graph)
    nodes = computed(graph)
    if len(nodes) > limit:
        raise ValueError(f"graph: {len(nodes)} computed nodes, more than limit={limit} for exhaustive search")
    best, best_key = None, None
    for part in partitions(nodes):
        if any(illegal_mix(graph, g) for g in part) or group_cycle(graph, part):
            continue
        key = (bytes_moved(graph, part), len(part))
        if best_key is None or key < best_key:
            best, best_key = part, key
    return _ordered(graph, best)


def greedy_fusion(graph: dict) -> list[list[str]]:
    """Start with one group per computed node; merge the legal pair of groups that saves the most bytes (any pair:
    producer and consumer, or siblings reading the same value) until no merge saves bytes."""
    ir.validate(graph)
    groups = [[n] for n in computed(graph)]
    while True:
        now, best = bytes_moved(graph, groups), None
        for a, b in itertools.combinations(range(len(groups)), 2):
            merged = [g for k, g in enumerate(groups) if k not in (a, b)] + [groups[a] + groups[b]]
            if illegal_mix(graph, merged[-1]) or group_cycle(graph, merged):
                continue
            saving = now - bytes_moved(graph, merged)
            if saving > 0 and (best is None or saving > best[0]):
                best = (saving, merged)
        if best is None:
            return _ordered(graph, groups)
        groups = best[1]


def _ordered(graph, groups):
    """Groups in an order in which each runs after the groups it reads from, each group's nodes in graph order."""
    order = {n: k for k, n in enumerate(ir.topological(graph))}
    groups = [sorted(g, key=order.get) for g in groups]
    where = _group_of(graph, groups)
    by_name = ir.nodes_by_name(graph)
    done, result = set(), []
    while len(result) < len(groups):
        for g, group in enumerate(groups):
            needs = {where[i] for n in group for i in by_name[n]["inputs"] if i in where} - {g}
            if g not in done and needs <= done:
                done.add(g)
                result.append(group)
                break
    return result


def execute(graph: dict, groups, inputs: dict) -> dict:
    """Run a legal grouping as kernels would: group after group, each reading only the values in memory (graph
    inputs, and what earlier groups wrote) and writing only what `reads_and_writes` says; {output: array}.
    An intermediate a group needs but no group wrote is an error, so a grouping that skips a write fails here."""
    check_fusion(graph, groups)
    by_name = ir.nodes_by_name(graph)
    memory = {n: np.asarray(inputs[n], np.float64).reshape(by_name[n]["shape"])
              for n in ir.topological(graph) if by_name[n]["op"] == "input"}
    for group in _ordered(graph, groups):
        reads, writes = reads_and_writes(graph, group)
        registers = {}
        for name in reads:
            if name not in memory:
                raise ValueError(f"groups: the group {group} reads {name!r}, which no earlier kernel wrote")
            registers[name] = memory[name]
        for name in group:
            n = by_name[name]
            args = [registers[i] if by_name[i]["op"] != "constant" else ir.apply("constant", [], by_name[i]["value"])
                    for i in n["inputs"]]
            registers[name] = ir.apply(n["op"], args, n.get("value"))
        for name in writes:
            memory[name] = registers[name]
    return {o: memory[o] for o in graph.get("outputs", [])}
