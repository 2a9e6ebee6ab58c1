"""Graph optimisations over aisys.graph.ir graphs, each returning a new graph: constant folding, algebraic
simplification, common-subexpression elimination, dead-code elimination; and memory planning (peak memory of a
schedule, with and without reusing dead buffers)."""

import copy

from . import ir


def _rename(graph, old, new):
    for n in graph["nodes"]:
        n["inputs"] = [new if i == old else i for i in n["inputs"]]
    graph["outputs"] = [new if o == old else o for o in graph["outputs"]]


def fold_constants(graph: dict) -> dict:
    """Every computed node whose inputs are all constants becomes a constant (its value computed now)."""
    g = copy.deepcopy(ir.validate(graph))
    by_name = ir.nodes_by_name(g)
    for name in ir.topological(g):
        n = by_name[name]
        if ir.kind(n) == "elementwise" and all(by_name[i]["op"] == "constant" for i in n["inputs"]):
            n["value"] = float(ir.apply(n["op"], [ir.apply("constant", [], by_name[i]["value"]) for i in n["inputs"]]))
            n.update(op="constant", kind="input", inputs=[])
    return g


IDENTITIES = {("mul", 1.0), ("div", 1.0), ("add", 0.0), ("sub", 0.0)}  # x op c == x (c on the right; mul, add both)


def simplify(graph: dict) -> dict:
    """x * 1, x / 1, x + 0, x - 0 (and 1 * x, 0 + x) become x; neg(neg(x)) becomes x."""
    g = copy.deepcopy(ir.validate(graph))
    by_name = ir.nodes_by_name(g)
    for name in ir.topological(g):
        n = by_name[name]
        if n["op"] in ("mul", "div", "add", "sub") and len(n["inputs"]) == 2:
            a, b = (by_name[i] for i in n["inputs"])
            for keep, c in ((a, b), (b, a)) if n["op"] in ("mul", "add") else ((a, b),):
                if c["op"] == "constant" and (n["op"], float(c["value"])) in IDENTITIES and keep["shape"] == n["shape"]:
                    _rename(g, name, keep["name"])
                    break
        elif n["op"] == "neg" and by_name[n["inputs"][0]]["op"] == "neg":
            _rename(g, name, by_name[n["inputs"][0]]["inputs"][0])
    return eliminate_dead_code(g)


def eliminate_common_subexpressions(graph: dict) -> dict:
    """Nodes with the same op on the same inputs (and the same constant value) are computed once."""
    g = copy.deepcopy(ir.validate(graph))
    by_name, seen = ir.nodes_by_name(g), {}
    for name in ir.topological(g):
        n = by_name[name]
        if n["op"] == "input":
            continue
        key = (n["op"], tuple(n["inputs"]), n.get("value"))
        if key in seen:
            _rename(g, name, seen[key])
        else:
            seen[key] = name
    return eliminate_dead_code(g)


def eliminate_dead_code(graph: dict) -> dict:
    """Only the nodes an output depends on (inputs included)."""
    by_name, live, todo = ir.nodes_by_name(graph), set(), list(graph["outputs"])
    while todo:
        name = todo.pop()
        if name not in live:
            live.add(name)
            todo += by_name[name]["inputs"]
    return {"nodes": [copy.deepcopy(n) for n in graph["nodes"] if n["name"] in live or n["op"] == "input"],
            "outputs": list(graph["outputs"])}


def peak_memory(graph: dict, order=None, reuse: bool = True) -> int:
    """Peak bytes held while running the computed nodes in `order` (topological by default), inputs included.
    With reuse, a value's buffer is freed after its last reader runs (unless it is an output); without, every
    value stays allocated to the end, as a naive allocator would."""
    ir.validate(graph)
    by_name = ir.nodes_by_name(graph)
    order = [n for n in (order or ir.topological(graph)) if by_name[n]["op"] not in ("input", "constant")]
    last = {}
    for step, name in enumerate(order):
        for i in by_name[name]["inputs"]:
            last[i] = step
    held = {n: ir.value_bytes(by_name[n]) for n in by_name if by_name[n]["op"] == "input"}
    peak = sum(held.values())
    for step, name in enumerate(order):
        held[name] = ir.value_bytes(by_name[name])
        peak = max(peak, sum(held.values()))
        if reuse:
            for i in set(by_name[name]["inputs"]):
                if last.get(i) == step and i not in graph["outputs"] and by_name[i]["op"] != "input":
                    held.pop(i, None)
    return peak
