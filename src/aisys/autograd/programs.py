"""Programs as plain data for an autograd engine: an interpreter onto any class with operators (Value, Tensor, Dual,
torch.Tensor), their gradients as plain data, and random programs (diamonds, broadcasting, matmul, long chains).

A program is a list of nodes; node i's value is referred to by its index, and the last node is the output:
    {"op": "input", "index": k}                           inputs[k]
    {"op": "number", "value": x}                          the Python float x (a constant, lifted by the operator)
    {"op": "add" | "sub" | "mul" | "div" | "matmul", "args": [i, j]}
    {"op": "neg" | "exp" | "log" | "tanh" | "relu", "args": [i]}
    {"op": "pow", "args": [i], "exponent": p}             p a number (a constant exponent)
    {"op": "sum" | "mean", "args": [i], "axis": None | int | [ints], "keepdims": bool}
    {"op": "reshape", "args": [i], "shape": [ints]}
    {"op": "transpose", "args": [i], "axes": None | [ints]}
"""

import operator

import numpy as np

from aisys.autograd.engine import Tensor, Value

BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
          "matmul": operator.matmul}
UNARY = ("neg", "exp", "log", "tanh", "relu")
OPS = (*BINARY, *UNARY, "input", "number", "pow", "sum", "mean", "reshape", "transpose")


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def validate(program, inputs: int) -> list:
    """`program` as a list of node dicts that refer only to earlier nodes and to inputs [0, inputs); ValueError
    naming `program` and the node otherwise."""
    if not isinstance(program, (list, tuple)) or not program:
        raise ValueError(f"program must be a non-empty list of nodes, got {type(program).__name__}")
    for i, node in enumerate(program):
        if not isinstance(node, dict) or node.get("op") not in OPS:
            raise ValueError(f"program[{i}] must be a node dict with an op in {OPS}, got {node!r}")
        if node["op"] == "input" and not (isinstance(node.get("index"), int) and 0 <= node["index"] < inputs):
            raise ValueError(f"program[{i}] reads input {node.get('index')!r}; there are {inputs} inputs")
        arity = 2 if node["op"] in BINARY else 0 if node["op"] in ("input", "number") else 1
        args = node.get("args", [])
        if len(args) != arity or not all(isinstance(a, int) and 0 <= a < i for a in args):
            raise ValueError(f"program[{i}] must have {arity} args, each the index of an earlier node; got {args!r}")
    return list(program)


def evaluate(program, leaves: list):
    """The program's output, computed with the operators and methods of `leaves` (Values, Tensors, Duals)."""
    values = []
    for node in program:
        op, args = node["op"], [values[i] for i in node.get("args", [])]
        if op == "input":
            value = leaves[node["index"]]
        elif op == "number":
            value = float(node["value"])
        elif op in BINARY:
            value = BINARY[op](*args)
        elif op == "neg":
            value = -args[0]
        elif op in UNARY:
            value = getattr(args[0], op)()
        elif op == "pow":
            value = args[0] ** node["exponent"]
        elif op in ("sum", "mean"):
            value = getattr(args[0], op)(axis=_axis(node.get("axis")), keepdims=bool(node.get("keepdims", False)))
        elif op == "reshape":
            value = args[0].reshape(tuple(node["shape"]))
        else:  # transpose
            value = args[0].transpose(_axis(node.get("axes")))
        values.append(value)
    return values[-1]


def gradients(program, inputs, requires_grad, upstream) -> dict:
    """Run `program` on Tensors made from `inputs` (float64 arrays; those with requires_grad False are constants),
    backward from its output with `upstream` (an array of the output's shape): {"output": array, "grads": one per
    input, its .grad (an array of the input's shape, or None for a constant or an input the output does not use)}."""
    program = validate(program, len(inputs))
    if len(requires_grad) != len(inputs):
        raise ValueError(f"requires_grad must hold one flag per input ({len(inputs)}), got {len(requires_grad)}")
    leaves = [Tensor(x, requires_grad=bool(r)) for x, r in zip(inputs, requires_grad)]
    out = evaluate(program, leaves)
    out.backward(upstream)
    return {"output": out.data, "grads": [leaf.grad for leaf in leaves]}


def scalar_gradients(program, inputs, requires_grad, upstream) -> dict:
    """`gradients` on Values: inputs and upstream are numbers, the output and each gradient a float (or None)."""
    program = validate(program, len(inputs))
    leaves = [Value(x, requires_grad=bool(r)) for x, r in zip(inputs, requires_grad)]
    out = evaluate(program, leaves)
    out.backward(upstream)
    return {"output": out.data, "grads": [leaf.grad for leaf in leaves]}


# --- the same program in torch ----------------------------------------------------------------------------------

class _Torch:
    """A torch tensor behind the interpreter's interface (numpy's `axis`/`keepdims`, `transpose(axes)`)."""

    def __init__(self, t):
        self.t = t

    def _lift(self, other):
        return other.t if isinstance(other, _Torch) else other

    def __add__(self, o): return _Torch(self.t + self._lift(o))  # noqa: E704
    def __sub__(self, o): return _Torch(self.t - self._lift(o))  # noqa: E704
    def __mul__(self, o): return _Torch(self.t * self._lift(o))  # noqa: E704
    def __truediv__(self, o): return _Torch(self.t / self._lift(o))  # noqa: E704
    def __matmul__(self, o): return _Torch(self.t @ self._lift(o))  # noqa: E704
    def __radd__(self, o): return _Torch(o + self.t)  # noqa: E704
    def __rsub__(self, o): return _Torch(o - self.t)  # noqa: E704
    def __rmul__(self, o): return _Torch(o * self.t)  # noqa: E704
    def __rtruediv__(self, o): return _Torch(o / self.t)  # noqa: E704
    def __neg__(self): return _Torch(-self.t)  # noqa: E704
    def __pow__(self, p): return _Torch(self.t ** p)  # noqa: E704
    def exp(self): return _Torch(self.t.exp())  # noqa: E704
    def log(self): return _Torch(self.t.log())  # noqa: E704
    def tanh(self): return _Torch(self.t.tanh())  # noqa: E704
    def relu(self): return _Torch(self.t.relu())  # noqa: E704
    def reshape(self, shape): return _Torch(self.t.reshape(shape))  # noqa: E704

    def sum(self, axis=None, keepdims=False):
        dims = tuple(range(self.t.ndim)) if axis is None else axis
        return _Torch(self.t.sum(dim=dims, keepdim=keepdims))

    def mean(self, axis=None, keepdims=False):
        dims = tuple(range(self.t.ndim)) if axis is None else axis
        return _Torch(self.t.mean(dim=dims, keepdim=keepdims))

    def transpose(self, axes=None):
        return _Torch(self.t.permute(tuple(range(self.t.ndim))[::-1] if axes is None else axes))


def torch_function(program):
    """The program as a function of torch tensors (one per input, in order), for torch.autograd and torch.func."""
    def f(*tensors):
        return evaluate(program, [_Torch(t) for t in tensors]).t
    return f


def torch_gradients(program, inputs, requires_grad, upstream) -> dict:
    """`gradients` computed by torch.autograd in float64 (None for constants and unused inputs)."""
    import torch

    leaves = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=bool(r))
              for x, r in zip(inputs, requires_grad)]
    out = torch_function(program)(*leaves)
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    grads = iter(torch.autograd.grad(out, wanted, torch.as_tensor(np.asarray(upstream, dtype=np.float64)),
                                     allow_unused=True))
    found = [next(grads) if leaf.requires_grad else None for leaf in leaves]
    return {"output": out.detach().numpy(), "grads": [None if g is None else g.numpy() for g in found]}


def torch_jvp(program, inputs, requires_grad, tangents) -> np.ndarray:
    """J u by torch.func.jvp: the output's tangent when the inputs that require grad move along `tangents` (one array
    per input; those of constants are ignored)."""
    import torch
    from torch.func import jvp

    primals = [torch.tensor(np.asarray(x, dtype=np.float64)) for x in inputs]
    moving = [i for i, r in enumerate(requires_grad) if r]
    f = torch_function(program)

    def of_moving(*xs):
        full = list(primals)
        for i, x in zip(moving, xs):
            full[i] = x
        return f(*full)

    _, tangent = jvp(of_moving, tuple(primals[i] for i in moving),
                     tuple(torch.tensor(np.asarray(tangents[i], dtype=np.float64)) for i in moving))
    return tangent.numpy()


# --- programs to test with ----------------------------------------------------------------------------------------

def chain(length: int) -> list:
    """A chain of `length` operations after the input, each value used once: x -> exp -> log -> neg -> exp ... Every
    three steps give -x again (up to rounding), so the values and the gradient stay of x's size at any length."""
    ops = ("exp", "log", "neg")
    return [{"op": "input", "index": 0}] + [{"op": ops[i % 3], "args": [i]} for i in range(length)]


def chain_gradient(x, upstream, length: int) -> tuple:
    """The output of `chain(length)` at x and its gradient, elementwise without a tape: the derivative of a chain of
    elementwise operations is the product of theirs (exp: its value; log: 1/x; neg: -1)."""
    y, d = np.array(x, dtype=np.float64), np.ones(np.shape(x))
    for i in range(length):
        op = i % 3
        if op == 0:
            y = np.exp(y)
            d = d * y
        elif op == 1:
            d = d / y
            y = np.log(y)
        else:
            y, d = -y, -d
    return y, d * upstream


def diamond() -> list:
    """out = exp(z) * z + z with z = x * y: z has three consumers, reached by paths of different lengths."""
    return [{"op": "input", "index": 0}, {"op": "input", "index": 1}, {"op": "mul", "args": [0, 1]},
            {"op": "exp", "args": [2]}, {"op": "mul", "args": [3, 2]}, {"op": "add", "args": [4, 2]}]


def forward(program, inputs) -> np.ndarray:
    """The program's output at `inputs` (arrays or numbers), without a tape."""
    return np.asarray(evaluate(program, [Tensor(x) for x in inputs]).data)


def random_program(rng: np.random.Generator, inputs: list, *, nodes: int = 12, ops=None, reuse: bool = True) -> list:
    """A random program over `inputs` (arrays; numbers for a scalar program) of about `nodes` operations, each
    valid at these inputs: logs of positive values, divisions by values away from 0, exponents of moderate values,
    matmuls of matching shapes. With `reuse`, operands are drawn from every earlier node (so values are used
    several times: diamonds); without, each node is used once (a tree)."""
    scalar = all(np.ndim(x) == 0 for x in inputs)
    ops = ops or (["add", "sub", "mul", "div", "neg", "exp", "log", "tanh", "relu", "pow"]
                  + ([] if scalar else ["matmul", "sum", "mean", "reshape", "transpose"]))
    program = [{"op": "input", "index": k} for k in range(len(inputs))]
    values = [np.asarray(x, dtype=np.float64) for x in inputs]
    unused = list(range(len(inputs)))
    for _ in range(50 * nodes):
        if len(program) - len(inputs) >= nodes:
            break
        op = str(rng.choice(ops))
        nodes_so_far = [k for k, n in enumerate(program) if n["op"] != "number"]
        pool = unused if (unused and (not reuse or rng.random() < 0.6)) else nodes_so_far
        if not pool:
            break
        i = int(rng.choice(pool))
        node, extra = {"op": op, "args": [i]}, []
        if op in ("add", "sub", "mul", "div", "matmul"):
            others = [j for j in (nodes_so_far if reuse else unused) if j != i or reuse]
            if rng.random() < 0.15 and op in ("add", "sub", "mul", "div"):  # a number on either side
                extra = [{"op": "number", "value": float(np.round(rng.uniform(0.5, 2), 2))}]
                j = len(program)
            elif others:
                j = int(rng.choice(others))
            else:
                continue
            node["args"] = [i, j] if rng.random() < 0.5 else [j, i]
        elif op == "pow":
            node["exponent"] = int(rng.choice([2, 3])) if rng.random() < 0.7 else float(rng.choice([0.5, -1.0]))
        elif op in ("sum", "mean"):
            ndim = values[i].ndim
            if ndim == 0:
                continue
            choice = rng.integers(3)
            node["axis"] = (None if choice == 0 else int(rng.integers(-ndim, ndim)) if choice == 1
                            else sorted(int(a) for a in rng.choice(ndim, size=min(2, ndim), replace=False)))
            node["keepdims"] = bool(rng.random() < 0.5)
        elif op == "reshape":
            size = values[i].size
            factors = [d for d in range(1, size + 1) if size % d == 0]
            d = int(rng.choice(factors))
            node["shape"] = [d, size // d] if rng.random() < 0.7 else [size]
        elif op == "transpose":
            if values[i].ndim < 2:
                continue
            node["axes"] = None if rng.random() < 0.5 else [int(a) for a in rng.permutation(values[i].ndim)]
        try:
            with np.errstate(all="raise"):
                value = forward(program + extra + [node], [np.asarray(x) for x in inputs])
        except (ValueError, FloatingPointError, ZeroDivisionError):
            continue  # shapes that do not match, a log of a negative...
        a = [values[k] if k < len(values) else np.asarray(extra[0]["value"]) for k in node["args"]]
        if (op == "log" and a[0].min(initial=1) < 0.2) or (op == "div" and np.abs(a[1]).min(initial=1) < 0.3) \
                or (op == "pow" and node["exponent"] in (0.5, -1.0) and a[0].min(initial=1) < 0.3) \
                or (op == "exp" and np.abs(a[0]).max(initial=0) > 3) \
                or (op == "relu" and np.abs(a[0]).min(initial=1) < 1e-3) \
                or not np.isfinite(value).all() or np.abs(value).max(initial=0) > 1e3 or value.size == 0:
            continue  # out of the domain, near relu's kink, or values too large to compare well
        for k in node["args"]:
            if k in unused:
                unused.remove(k)
        for new in extra:
            program.append(new)
            values.append(np.asarray(new["value"]))
        program.append(node)
        values.append(value)
    return _join_sinks(program, values)


def _join_sinks(program: list, values: list) -> list:
    """Add every value nothing uses (but the output and numbers) into the output, summed first where it would not
    broadcast to the output's shape: the output then depends on every input."""
    used = {k for node in program for k in node.get("args", [])}
    for k in range(len(program) - 1):
        if k in used or program[k]["op"] == "number":
            continue
        out = len(program) - 1
        try:
            fits = np.broadcast_shapes(values[k].shape, values[out].shape) == values[out].shape
        except ValueError:
            fits = False
        if not fits:
            program.append({"op": "sum", "args": [k], "axis": None, "keepdims": False})
            values.append(values[k].sum())
            k = len(program) - 1
        program.append({"op": "add", "args": [out, k]})
        values.append(values[out] + values[k])
    return program
