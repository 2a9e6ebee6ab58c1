"""A computation graph as plain data, its validation, topological order and a plain numpy evaluation.

A graph is a dict {"nodes": [node, ...], "outputs": [name, ...]}. A node is a dict
    {"name": str, "op": str, "inputs": [name, ...], "shape": [int, ...], "dtype": "fp32" | "fp16" | "bf16"}
with "kind" derived from "op" (or given, and then checked): one of
    input        op "input" (data in memory) or "constant" (a scalar "value" written into the code)
    elementwise  unary "neg exp log sqrt tanh sigmoid relu gelu square", binary "add sub mul div maximum";
                 operands broadcast as numpy does (a bias of shape [N] against [M, N])
    reduction    "sum" or "max" over the LAST axis, keeping it as 1: [M, N] -> [M, 1]
    matmul       "matmul": [M, K] @ [K, N] -> [M, N]
Every name used as an input must be defined earlier in the list or later (the order is free): `topological`
gives an order in which every node follows its inputs, and a cycle is an error.
"""

import math
from collections import defaultdict

import numpy as np

from .._validate import one_of
from ..dtypes import bytes_per_element

UNARY = ("neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "square")
BINARY = ("add", "sub", "mul", "div", "maximum")
REDUCTIONS = ("sum", "max")
KINDS = {"input": "input", "constant": "input", "matmul": "matmul",
         **{op: "elementwise" for op in UNARY + BINARY}, **{op: "reduction" for op in REDUCTIONS}}
DTYPES = ("fp32", "fp16", "bf16")


def kind(node: dict) -> str:
    """The node's kind: "input", "elementwise", "reduction" or "matmul"."""
    return KINDS[node["op"]]


def node(name: str, op: str, inputs=(), shape=(), dtype: str = "fp32", **extra) -> dict:
    """A node as plain data; its kind follows from its op."""
    one_of("op", op, tuple(KINDS))
    return {"name": name, "op": op, "inputs": list(inputs), "shape": [int(s) for s in shape], "dtype": dtype,
            "kind": KINDS[op], **extra}


def broadcast_shape(shapes, where: str) -> list[int]:
    """numpy's broadcast of `shapes` (right-aligned, a 1 stretches); ValueError naming `where` otherwise."""
    try:
        return list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"{where}: operand shapes {[list(s) for s in shapes]} do not broadcast") from None


def nodes_by_name(graph: dict) -> dict:
    return {n["name"]: n for n in graph["nodes"]}


def consumers(graph: dict) -> dict:
    """{name: [names of the nodes that read it]} (a node reading a value twice is listed once)."""
    users = defaultdict(list)
    for n in graph["nodes"]:
        for i in dict.fromkeys(n["inputs"]):
            users[i].append(n["name"])
    return {n["name"]: users[n["name"]] for n in graph["nodes"]}


def topological(graph: dict) -> list[str]:
    """Names in an order where each node follows its inputs (stable: the list's order where it allows);
    ValueError naming `graph` if the inputs form a cycle."""
    by_name = nodes_by_name(graph)
    order, state = [], {}

    def visit(name, path):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            raise ValueError(f"graph: the inputs form a cycle through {' -> '.join(path + [name])}")
        state[name] = "open"
        for i in by_name[name]["inputs"]:
            visit(i, path + [name])
        state[name] = "done"
        order.append(name)

    for n in graph["nodes"]:
        visit(n["name"], [])
    return order


def validate(graph) -> dict:
    """The graph, checked: ValueError naming `graph`, the node and what was expected."""
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list):
        raise ValueError(f"graph: expected a dict with a list 'nodes', got {type(graph).__name__}")
    names = [n.get("name") if isinstance(n, dict) else None for n in graph["nodes"]]
    for n in graph["nodes"]:
        if not isinstance(n, dict) or not isinstance(n.get("name"), str):
            raise ValueError(f"graph: every node must be a dict with a string 'name', got {n!r}")
    duplicates = sorted({x for x in names if names.count(x) > 1})
    if duplicates:
        raise ValueError(f"graph: node names must be unique, {duplicates} repeat")
    by_name = dict(zip(names, graph["nodes"]))
    for n in graph["nodes"]:
        where = f"graph: node {n['name']!r}"
        if n.get("op") not in KINDS:
            raise ValueError(f"{where}: op must be one of {sorted(KINDS)}, got {n.get('op')!r}")
        if "kind" in n and n["kind"] != KINDS[n["op"]]:
            raise ValueError(f"{where}: op {n['op']!r} is of kind {KINDS[n['op']]!r}, not {n['kind']!r}")
        if n.get("dtype", "fp32") not in DTYPES:
            raise ValueError(f"{where}: dtype must be one of {DTYPES}, got {n.get('dtype')!r}")
        shape = n.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"{where}: shape must be a list of non-negative ints, got {shape!r}")
        missing = [i for i in n.get("inputs", []) if i not in by_name]
        if missing:
            raise ValueError(f"{where}: reads {missing}, which no node defines")
        arity = {"input": 0, "constant": 0, "matmul": 2, **{o: 1 for o in UNARY + REDUCTIONS},
                 **{o: 2 for o in BINARY}}[n["op"]]
        if len(n.get("inputs", [])) != arity:
            raise ValueError(f"{where}: op {n['op']!r} takes {arity} inputs, got {len(n.get('inputs', []))}")
        expected = _shape_of(n, [by_name[i]["shape"] for i in n["inputs"]], where)
        if expected is not None and expected != shape:
            raise ValueError(f"{where}: op {n['op']!r} of {[by_name[i]['shape'] for i in n['inputs']]} has shape "
                             f"{expected}, not {shape}")
        if n["op"] == "constant" and (shape != [] or not isinstance(n.get("value"), (int, float))):
            raise ValueError(f"{where}: a constant is a scalar (shape []) with a number 'value'")
    outputs = graph.get("outputs", [])
    if not isinstance(outputs, list) or not all(o in by_name for o in outputs):
        raise ValueError(f"graph: 'outputs' must list names of nodes, got {outputs!r}")
    topological(graph)
    return graph


def _shape_of(n, shapes, where):
    k = KINDS[n["op"]]
    if k == "input":
        return None
    if k == "elementwise":
        return broadcast_shape(shapes, where)
    if k == "reduction":
        if not shapes[0]:
            raise ValueError(f"{where}: a reduction needs an operand with at least one axis")
        return shapes[0][:-1] + [1]
    a, b = shapes
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise ValueError(f"{where}: matmul needs [M, K] and [K, N], got {a} and {b}")
    return [a[0], b[1]]


def value_bytes(n: dict) -> int:
    """Bytes of a node's value in memory: its elements times its dtype's size."""
    return int(math.prod(n["shape"]) * bytes_per_element(n.get("dtype", "fp32")))


_erf = np.frompyfunc(math.erf, 1, 1)


def apply(op: str, args: list, value=None) -> np.ndarray:
    """One op on numpy arrays (float64 math, as the reference computes)."""
    if op == "constant":
        return np.float64(value)
    a = args[0] if args else None
    unary = {"neg": lambda: -a, "exp": lambda: np.exp(a), "log": lambda: np.log(a), "sqrt": lambda: np.sqrt(a),
             "tanh": lambda: np.tanh(a), "sigmoid": lambda: 1 / (1 + np.exp(-a)), "relu": lambda: np.maximum(a, 0),
             "gelu": lambda: 0.5 * a * (1 + _erf(np.asarray(a, np.float64) / math.sqrt(2)).astype(np.float64)),
             "square": lambda: a * a,
             "sum": lambda: a.sum(axis=-1, keepdims=True), "max": lambda: a.max(axis=-1, keepdims=True)}
    if op in unary:
        return np.asarray(unary[op](), np.float64)
    b = args[1]
    binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
              "matmul": np.matmul}
    return np.asarray(binary[op](a, b), np.float64)


def evaluate(graph: dict, inputs: dict) -> dict:
    """{output name: array} of the graph on `inputs` ({input name: array}), node after node, in float64."""
    validate(graph)
    by_name, values = nodes_by_name(graph), {}
    for name in topological(graph):
        n = by_name[name]
        if n["op"] == "input":
            if name not in inputs:
                raise ValueError(f"inputs: no array for the graph's input {name!r}")
            values[name] = np.asarray(inputs[name], np.float64).reshape(n["shape"])
        else:
            values[name] = apply(n["op"], [values[i] for i in n["inputs"]], n.get("value"))
    return {o: values[o] for o in graph.get("outputs", [])}
