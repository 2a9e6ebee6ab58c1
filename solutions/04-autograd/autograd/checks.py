"""Checks: reverse-mode autograd on Values and Tensors, through the notebook's interpreter of programs as data.

Every case sends a program (a list of nodes), its inputs, which inputs require grad, and a random upstream
gradient (never ones) to `gradients` / `scalar_gradients`, and compares the output and every input's gradient with
torch.autograd in float64: each gradient of its input's exact shape and float64, None for a constant. Visible cases
are fixed; hidden ones redraw the values and add random programs. Each mistake is caught by a fixed case on every
seed: diamonds (a value used by consumers at different depths) for accumulation and order, a (3, 1) operand for
summing back with kept axes, a 2-layer network for matmul and a sum over one axis, a chain of 10,000 operations for
recursion. `tensor_graphs` also checks the dot-product identity <v, J u> = <J^T v, u> for random u and v, with J u
from torch.func.jvp on the same program, which weighs every element of every gradient.
"""

import numpy as np

from aisys.autograd import programs
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, describe, raised, unredacted

RTOL, ATOL = 1e-7, 1e-9  # float64 through at most ~30 operations: torch's and numpy's exp/log/tanh differ in the last
# bit and sums run in other orders (~1e-14 relative); every mistake below changes a gradient by more than 1e-2
GRAPH_OPS = ["add", "sub", "mul", "div", "neg", "exp", "log", "tanh", "relu"]  # random graphs: no pow (a rule that
# value_rules and tensor_rules judge), so each known mistake fails the same checks on every seed


def _input(k):
    return {"op": "input", "index": k}


def _expression(program) -> str:
    """A program as one line of assignments, for visible messages: v2 = mul(v0, v1); ..."""
    parts = []
    for i, node in enumerate(program):
        op = node["op"]
        if op == "input":
            continue
        if op == "number":
            parts.append(f"v{i} = {node['value']:g}")
            continue
        extra = {k: v for k, v in node.items() if k not in ("op", "args")}
        args = ", ".join([f"v{a}" for a in node["args"]] + [f"{k}={v}" for k, v in extra.items()])
        parts.append(f"v{i} = {op}({args})")
    text = "; ".join(parts)
    return text if len(text) <= 160 else text[:157] + "..."


def _call(name):
    def named(case) -> str:
        shapes = [tuple(np.shape(x)) for x in case["inputs"]]
        inputs = ", ".join(f"x{k}{'' if r else ' (constant)'}: {s if s else 'scalar'}"
                           for k, (s, r) in enumerate(zip(shapes, case["requires_grad"])))
        what = unredacted(f"[{_expression(case['program'])}]", f"a hidden program of {len(case['program'])} nodes")
        return f"{name}({what}; inputs {inputs}; a random upstream of shape {tuple(np.shape(case['upstream']))})"
    return named


def _case(program, inputs, rng, requires_grad=None, scalar=False) -> dict:
    inputs = [float(x) for x in inputs] if scalar else [np.asarray(x, dtype=np.float64) for x in inputs]
    out = programs.forward(program, inputs)
    upstream = float(rng.uniform(0.5, 2) * rng.choice([-1, 1])) if scalar else rng.uniform(-2, 2, out.shape)
    return {"program": program, "inputs": inputs, "requires_grad": requires_grad or [True] * len(inputs),
            "upstream": upstream}


def _expected(program, inputs, requires_grad, upstream) -> dict:
    """torch.autograd's answer, as the notebook's functions return it (floats for scalar programs)."""
    result = programs.torch_gradients(program, inputs, requires_grad, upstream)
    if all(np.ndim(x) == 0 for x in inputs) and np.ndim(upstream) == 0:
        grads = [None if g is None else float(g) for g in result["grads"]]
        result = {"output": float(result["output"]), "grads": grads}
    return result


def _judge(got, expected, case) -> None:
    """The output, then each gradient: None for a constant, else its input's exact shape, float64, and values."""
    if not (isinstance(got, dict) and set(got) == {"output", "grads"}):
        raise CheckFailure(f"expected a mapping with keys 'output' and 'grads', got {describe(got)}")
    assert_close(got["output"], expected["output"], rtol=RTOL, atol=ATOL, where="the output")
    grads = got["grads"]
    if not (isinstance(grads, list) and len(grads) == len(expected["grads"])):
        raise CheckFailure(f"'grads' should hold one entry per input ({len(expected['grads'])}), got "
                           f"{describe(grads)}")
    for k, (mine, want) in enumerate(zip(grads, expected["grads"])):
        where = f"the gradient of x{k}"
        if want is None:
            if mine is not None:
                why = ("a constant (requires_grad=False)" if not case["requires_grad"][k]
                       else "not used by the output")
                raise CheckFailure(f"{where}: x{k} is {why}, so its .grad must stay None, got {describe(mine)}: "
                                   "gradients flow only into values that require grad")
            continue
        if mine is None:
            raise CheckFailure(f"{where} is None: x{k} requires grad and the output depends on it")
        if isinstance(want, np.ndarray):
            if want.shape == () and isinstance(mine, float):
                mine = np.asarray(mine)  # numpy's reductions give a 0-d gradient as a float64 scalar: the same
            if not isinstance(mine, np.ndarray):
                raise CheckFailure(f"{where}: expected an array of shape {want.shape}, got {describe(mine)}")
            if mine.shape != want.shape:
                raise CheckFailure(f"{where} has shape {mine.shape}, but x{k} has shape {want.shape}: a gradient "
                                   "has its operand's exact shape (sum the gradient over the axes broadcasting "
                                   "added, and over the axes where the operand had 1, keeping them)")
            if mine.dtype != np.float64:
                raise CheckFailure(f"{where} has dtype {mine.dtype}; gradients are float64")
        assert_close(mine, want, rtol=RTOL, atol=ATOL, where=where)


def _compare(student, name, cases, hidden, hint=None, judge=_judge):
    compare_cases(student, name, cases, _expected, returns="mapping", hidden=hidden, compare=judge, call=_call(name),
                  hint=hint)


def _unary(node) -> list:
    return [_input(0), {**node, "args": [0]}]


def _binary(op, number=None, left=False) -> list:
    """x0 op x1, or x0 op number (number op x0 with `left`)."""
    if number is None:
        return [_input(0), _input(1), {"op": op, "args": [0, 1]}]
    return [_input(0), {"op": "number", "value": number}, {"op": op, "args": [1, 0] if left else [0, 1]}]


# --- scalars ------------------------------------------------------------------------------------------------------

def _rule_hint(case, got, expected) -> str:
    op = case["program"][-1]["op"]
    if op == "pow":
        return "the derivative of x ** p is p * x ** (p - 1)"
    if op == "div":
        return "d(a / b)/da = 1 / b and d(a / b)/db = -a / b ** 2"
    return "a vjp returns g times the operation's derivative with respect to each parent, in the order of .parents"


@check(points=2)
def value_rules(student, rng, hidden):
    """scalar_gradients: each operation alone on Values, numbers on either side, with a random upstream."""
    x, y = (float(rng.uniform(0.6, 1.8)), float(-rng.uniform(0.6, 1.8))) if hidden else (1.3, -0.7)
    positive = [(x,)]
    cases = [_case(_binary(op), [x, y], rng, scalar=True) for op in ("add", "sub", "mul", "div")]
    cases += [_case(_binary(op, 2.5, left), [y], rng, scalar=True) for op in ("sub", "mul", "div") for left in
              (False, True)]
    cases += [_case(_unary(node), *positive, rng, scalar=True) for node in
              ({"op": "exp"}, {"op": "log"}, {"op": "tanh"}, {"op": "neg"}, {"op": "pow", "exponent": 3},
               {"op": "pow", "exponent": 0.5}, {"op": "pow", "exponent": -1.0})]
    cases += [_case(_unary({"op": "relu"}), [v], rng, scalar=True) for v in (x, y)]
    _compare(student, "scalar_gradients", cases, hidden, hint=_rule_hint)


def _graph_hint(case, got, expected) -> str:
    return ("a value used several times gets the sum of the gradients of its uses, and a node may pass its gradient "
            "on only after every consumer has added its share: walk a topological order in reverse")


def _reused(n: int) -> list:
    """x0 * x0 * ... (n factors): x0 used n times."""
    program = [_input(0), {"op": "mul", "args": [0, 0]}]
    for _ in range(n - 2):
        program.append({"op": "mul", "args": [len(program) - 1, 0]})
    return program


def _deep_and_shallow() -> list:
    """z = x0 * x1; out = z + tanh(exp(tanh(z))): z reached directly and three operations deep."""
    return [_input(0), _input(1), {"op": "mul", "args": [0, 1]}, {"op": "tanh", "args": [2]},
            {"op": "exp", "args": [3]}, {"op": "tanh", "args": [4]}, {"op": "add", "args": [2, 5]}]


@check(points=2)
def value_graphs(student, rng, hidden):
    """scalar_gradients on diamonds, a value used 20 times, and random graphs: shares summed, in topological order."""
    x, y = (float(rng.uniform(0.8, 1.1)), float(-rng.uniform(0.4, 1.2))) if hidden else (1.05, -0.5)
    cases = [_case(programs.diamond(), [x, y], rng, scalar=True),
             _case(_deep_and_shallow(), [x, y], rng, scalar=True),
             _case(_reused(20), [x], rng, scalar=True)]
    for _ in range(3 if hidden else 1):
        inputs = [float(v) for v in rng.uniform(0.5, 1.5, 3) * rng.choice([-1, 1], 3)]
        cases.append(_case(programs.random_program(rng, inputs, nodes=12, ops=GRAPH_OPS), inputs, rng, scalar=True))
    _compare(student, "scalar_gradients", cases, hidden, hint=_graph_hint)


# --- tensors ------------------------------------------------------------------------------------------------------

@check(points=2)
def tensor_rules(student, rng, hidden):
    """gradients: each tensor operation alone on equal shapes; sum and mean over every axis, keepdims or not; matmul,
    reshape, transpose; float64 gradients of their operand's shape."""
    m, n = (3, 4)
    x, y = rng.uniform(0.5, 2, (m, n)) * rng.choice([-1, 1], (m, n)), rng.uniform(0.5, 2, (m, n))
    cube = rng.standard_normal((2, 3, 4))
    cases = [_case(_binary(op), [x, y], rng) for op in ("add", "sub", "mul", "div")]
    cases += [_case(_unary({"op": op}), [x], rng) for op in ("neg", "exp", "tanh", "relu")]
    cases += [_case(_unary(node), [y], rng) for node in
              ({"op": "log"}, {"op": "pow", "exponent": 2}, {"op": "pow", "exponent": 3},
               {"op": "pow", "exponent": 0.5}, {"op": "pow", "exponent": -1.0})]
    for op in ("sum", "mean"):
        for axis in (None, 0, 1, -1, [0, 1]):
            cases += [_case(_unary({"op": op, "axis": axis, "keepdims": keep}), [x], rng) for keep in (False, True)]
    cases += [_case(_unary({"op": "sum", "axis": [0, 2], "keepdims": False}), [cube], rng),
              _case(_unary({"op": "reshape", "shape": [2, 6]}), [x], rng),
              _case(_unary({"op": "reshape", "shape": [12]}), [x], rng),
              _case(_unary({"op": "transpose", "axes": None}), [x], rng),
              _case(_unary({"op": "transpose", "axes": [1, 2, 0]}), [cube], rng)]
    sizes = [(3, 4, 2), (1, 5, 1), (5, 1, 5), (4, 4, 4)]
    if hidden:
        sizes.append(tuple(int(v) for v in rng.integers(1, 6, 3)))
    cases += [_case(_binary("matmul"), [rng.standard_normal((a, k)), rng.standard_normal((k, b))], rng)
              for a, k, b in sizes]

    def hint(case, got, expected):
        op = case["program"][-1]["op"]
        return {"matmul": "for out = a @ b: dL/da = g @ b.T and dL/db = a.T @ g",
                "sum": "every element summed receives the sum's gradient: without keepdims, put the reduced axes "
                       "back (np.expand_dims) before broadcasting to the input's shape",
                "pow": "the derivative of x ** p is p * x ** (p - 1)"}.get(op, "")
    _compare(student, "gradients", cases, hidden, hint=hint)


BROADCASTS = [[(3, 4), (4,)], [(3, 4), (3, 1)], [(1, 4), (3, 1)], [(), (2, 3)], [(2, 3), ()], [(2, 3, 4), (3, 1)],
              [(4,), (2, 3, 4)], [(3, 1), (1, 1)], [(1,), (3, 4)]]


@check(points=2)
def broadcasting(student, rng, hidden):
    """gradients of add, sub, mul, div on shapes that broadcast every way: each gradient summed back to its
    operand's exact shape, size-1 axes kept."""
    cases = []
    for i, shapes in enumerate(BROADCASTS):
        for op in ("add", "sub", "mul", "div") if not hidden else rng.permutation(["add", "sub", "mul", "div"])[:2]:
            inputs = [rng.uniform(0.5, 2, s) * rng.choice([-1, 1], s) for s in shapes]
            cases.append(_case(_binary(str(op)), inputs, rng))
    x = rng.standard_normal((3, 4))
    cases += [_case(_binary("mul", 2.5), [x], rng), _case(_binary("sub", 1.5, left=True), [x], rng)]

    def hint(case, got, expected):
        return ("an operand broadcast along an axis is used once per element of that axis: sum its gradient over "
                "the axes broadcasting prepended, and over the axes where it had size 1 (keepdims=True)")
    _compare(student, "gradients", cases, hidden, hint=hint)


def _network() -> list:
    """Rows of a 2-layer network's squared error: sum((tanh(X @ W1 + b1) @ W2 - T) ** 2, axis=1), shape (5,)."""
    return [_input(0), _input(1), _input(2), _input(3), _input(4),
            {"op": "matmul", "args": [0, 1]}, {"op": "add", "args": [5, 2]}, {"op": "tanh", "args": [6]},
            {"op": "matmul", "args": [7, 3]}, {"op": "sub", "args": [8, 4]}, {"op": "mul", "args": [9, 9]},
            {"op": "sum", "args": [10], "axis": 1, "keepdims": False}]


def _identity(tangents: dict):
    """_judge, then <v, J u> = <J^T v, u>: v is the upstream, u random tangents of the inputs, J u by torch.func.jvp,
    and J^T v the student's gradients."""
    def judge(got, expected, case):
        _judge(got, expected, case)
        u = tangents[id(case)]
        ju = programs.torch_jvp(case["program"], case["inputs"], case["requires_grad"], u)
        left = float(np.vdot(case["upstream"], ju))
        terms = [np.vdot(g, t) for g, t in zip(got["grads"], u) if g is not None]
        right = float(sum(terms))
        scale = float(np.abs(case["upstream"]).ravel() @ np.abs(ju).ravel()
                      + sum(np.abs(g).ravel() @ np.abs(t).ravel() for g, t in zip(got["grads"], u) if g is not None))
        if not abs(left - right) <= 1e-9 * scale + 1e-12:  # the two sums differ by rounding only, ~1e-15 * scale
            raise CheckFailure(f"the dot-product identity <v, J u> = <J^T v, u> fails (v: the upstream; u: random "
                               f"tangents; J u from torch.func.jvp): they differ by {abs(left - right) / scale:.2g} "
                               "of the sum of the terms' sizes")
    return judge


@check(points=3)
def tensor_graphs(student, rng, hidden):
    """gradients of a diamond over broadcast operands, a 2-layer network and random programs: against torch, and by
    the dot-product identity <v, J u> = <J^T v, u> for random u and v."""
    cases = [_case(programs.diamond(), [rng.uniform(-1, 1, (3, 1)), rng.uniform(-1, 1, (1, 4))], rng),
             _case(_network(), [rng.standard_normal(s) for s in [(5, 3), (3, 4), (4,), (4, 2), (5, 2)]], rng)]
    for _ in range(4 if hidden else 1):
        inputs = [rng.standard_normal(s) for s in [(3, 4), (4,), (3, 1), (4, 2)]]
        ops = GRAPH_OPS + ["matmul", "sum", "mean", "reshape", "transpose"]
        cases.append(_case(programs.random_program(rng, inputs, nodes=12, ops=ops), inputs, rng))
    tangents = {id(case): [rng.standard_normal(np.shape(x)) for x in case["inputs"]] for case in cases}
    _compare(student, "gradients", cases, hidden, hint=_graph_hint, judge=_identity(tangents))


CHAIN = 10_000


def _chain_expected(ops, length, x, upstream) -> dict:
    output, grad = programs.chain_gradient(x, upstream, length)
    return {"output": float(output), "grads": [float(grad)]}


@check(points=1)
def long_chain(student, rng, hidden):
    """chain_gradients: 10,000 operations in a row (exp, log, neg, exp, ...) on a Value: backward must not recurse."""
    cases = [{"ops": ["exp", "log", "neg"], "length": CHAIN, "x": float(rng.uniform(-1, 1)) if hidden else 0.7,
              "upstream": float(rng.uniform(0.5, 2))}]

    def call(case):
        return f"chain_gradients(a chain of {CHAIN:,} operations, exp, log, neg, exp, ..., on a Value)"

    def judge(got, expected, case):
        _judge(got, expected, {"requires_grad": [True]})
    try:
        compare_cases(student, "chain_gradients", cases, _chain_expected, returns="mapping", hidden=hidden,
                      compare=judge, call=call)
    except CheckFailure as failure:
        deep = "RecursionError" in str(failure) or "recursion" in str(failure).lower()
        raise CheckFailure(str(failure) + (". A recursive topological sort goes one Python frame deeper per node: "
                                           "use an explicit stack" if deep else "")) from None


@check(points=1)
def constants(student, rng, hidden):
    """Leaves with requires_grad=False (and subgraphs of constants only) get no gradient: their .grad stays None."""
    x, c = rng.standard_normal((3, 4)), rng.uniform(0.5, 1.5, (3, 4))
    cases = [_case([_input(0), _input(1), {"op": "mul", "args": [0, 1]}, {"op": "tanh", "args": [2]},
                    {"op": "add", "args": [3, 1]}], [x, c], rng, [True, False]),
             _case([_input(0), _input(1), {"op": "mul", "args": [1, 1]}, {"op": "mul", "args": [0, 2]},
                    {"op": "exp", "args": [1]}, {"op": "add", "args": [3, 4]}], [x, c], rng, [True, False]),
             _case([_input(0), _input(1), {"op": "mul", "args": [0, 1]}, {"op": "exp", "args": [2]},
                    {"op": "mul", "args": [3, 2]}, {"op": "add", "args": [4, 2]}], [x, c], rng, [False, True]),
             _case([_input(0), {"op": "number", "value": 2.5}, {"op": "mul", "args": [1, 0]},
                    {"op": "number", "value": 1.5}, {"op": "sub", "args": [2, 3]}], [x], rng)]
    for _ in range(3 if hidden else 1):
        inputs = [rng.uniform(-1, 1, (3, 4)) for _ in range(3)]
        program = programs.random_program(rng, inputs, nodes=10, ops=["add", "sub", "mul", "tanh", "exp", "neg"])
        cases.append(_case(program, inputs, rng, [True, False, True]))
    _compare(student, "gradients", cases, hidden)
    scalar = [_case(programs.diamond(), [0.8, -0.6], rng, [True, False], scalar=True)]
    _compare(student, "scalar_gradients", scalar, hidden)


@check(points=1)
def upstream(student, rng, hidden):
    """Tensor.backward refuses an upstream gradient of another shape than the output's: ValueError naming upstream."""
    x = rng.standard_normal((3, 4))
    program = _unary({"op": "tanh"})
    wrong = [(4,), (4, 3), (1, 3, 4), (), (3, 1)]
    total = [_input(0), {"op": "sum", "args": [0], "axis": None, "keepdims": False}]
    cases = [(program, s) for s in wrong] + [(total, (1,))]
    for prog, shape in cases:
        out = "()" if prog is total else "(3, 4)"
        call = f"gradients on an output of shape {out} with an upstream of shape {shape}"
        got = student.call("backward_error", prog, [x], [True], rng.standard_normal(shape), returns="any")
        if got is None:
            raise CheckFailure(f"{call} returned; it should raise ValueError naming upstream (the upstream gradient "
                               "has the output's shape exactly: broadcasting it would differentiate another loss)")
        if not (isinstance(got, list) and len(got) == 2 and got[0] == "ValueError"):
            raise CheckFailure(f"{call} raised {raised(got[1]) if isinstance(got, list) and len(got) == 2 else '?'}"
                               ", not ValueError")
        if "upstream" not in str(got[1]):
            raise CheckFailure(f"{call} raised ValueError, but its message should name upstream"
                               + unredacted(f"; it says {got[1]!r}"))
