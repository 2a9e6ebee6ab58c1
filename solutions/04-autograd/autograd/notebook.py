# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: reverse-mode automatic differentiation
#
# **You will learn** to build the engine under `loss.backward()`: values that record the operations applied to
# them (a tape built by operator overloading, as PyTorch does: Paszke et al. 2017, "Automatic differentiation in
# PyTorch", section 2), each operation's vector-Jacobian product, and reverse mode itself (Griewank & Walther,
# *Evaluating Derivatives*, 2nd ed. 2008, chapter 3; Baydin et al., JMLR 2018, section 3.2): visit the graph in
# reverse topological order, so that a value's gradient is complete (summed over every use) before it flows on.
# Scalars first (micrograd's `Value`), then numpy tensors with broadcasting, where a gradient must be summed back
# to its operand's shape. The checks send programs of their own (diamonds, broadcasting of every kind, a chain of
# 10,000 operations, constants) through a given interpreter onto your classes, and compare with `torch.autograd`
# in float64 and with the identity $\langle v, J u\rangle = \langle J^\top v, u\rangle$ for random $u$ and $v$.
#
# **The conventions, all of them:**
# - A **node** (a `Value` or a `Tensor`) has `.data` (a float, or a float64 numpy array), `.requires_grad`,
#   `.grad` (None until `backward` gives it a gradient), `.parents` (the nodes it was computed from, a tuple) and
#   `.vjp` (None for a leaf; for an operation's result, a function from `g = dL/d(result)` to a tuple with one
#   gradient `dL/d(parent)` per parent, in the order of `.parents`). A result requires grad when one of its parents
#   does, and only then records parents and a vjp (`result`, given). A leaf made with `requires_grad=False` is a
#   **constant**: it gets no gradient, its `.grad` stays **None**. Python numbers in an operation (`x * 2.5`,
#   `1 / x`) become constants.
# - `backward(root, upstream)` receives `upstream = dL/d(root)` (a float for a `Value`, a float64 array of the
#   root's shape for a `Tensor`: **any** values, never assume ones). It visits every node `root` depends on
#   through nodes that require grad, each node **after all of its consumers**, adds every parent's share (a value
#   used several times gets the **sum** of its uses' gradients), and sets `.grad` of each leaf that requires grad
#   (add into it if it is not None, as torch does). It must not recurse: graphs 10,000 operations deep are checked,
#   and Python's recursion limit is about 1,000 frames. Each graph is differentiated once.
# - `topological_order(root)` returns those nodes as a list, each after its parents (`root` last); `backward`
#   walks it in reverse.
# - Derivatives: `x ** p` (p a constant number) is `p x^(p-1)`; `relu(x)` has derivative 1 for `x > 0`, else 0
#   (0 at 0, as torch); `log(x)` is the natural log; `tanh'(x) = 1 - tanh(x)^2`; `exp' = exp`.
# - **Tensors** broadcast as numpy does. The gradient of an operand has the operand's **exact shape**: sum the
#   result's gradient over the axes broadcasting prepended, and over each axis where the operand had size 1,
#   keeping it (`unbroadcast`). `a @ b` takes 2-d arrays `(m, k) @ (k, n)`. `sum(axis, keepdims)` and
#   `mean(axis, keepdims)` take `axis` None (every axis), an int or a tuple of ints, negative ones counting from
#   the end, as numpy. `reshape(shape)` and `transpose(axes=None)` (None reverses the axes) as numpy.
#   Gradients are **float64** arrays.
# - `Tensor.backward(upstream)` raises `ValueError` whose message contains `upstream` unless `upstream` is an
#   array of the output's exact shape (no broadcasting of the upstream gradient).
# - The checks call `gradients(program, inputs, requires_grad, upstream)` and `scalar_gradients(...)`, given
#   below: they build leaves from `inputs`, run `program` through the interpreter `evaluate` onto your classes'
#   operators, call your `backward` and return `{"output": ..., "grads": [each leaf's .grad]}`. Results are
#   compared within a relative tolerance of 1e-7 and an absolute one of 1e-9.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import gc
import math

import numpy as np

from aisys_grader import checker

check = checker("04-autograd/autograd", globals())

# %% [markdown]
# ## 1. The tape, in topological order
#
# Every node is computed from its parents, so the nodes form a directed acyclic graph. Reverse mode needs the
# gradient of a node complete before it passes it on to the node's parents: every consumer of the node must have
# added its share first. A **topological order** (parents before children) walked **backwards** gives exactly
# that. Write it with an explicit stack (a depth-first search that appends a node once all its parents are
# placed, or Kahn's algorithm counting consumers): no recursion.
#
# `backward` then holds the gradients of the nodes as it goes (a dictionary keyed by `id(node)` works, or
# `.grad` on every node), starting with `upstream` at the root; for each node in reverse order, it calls
# `node.vjp(g)` and adds each share into its parent's gradient, skipping parents that do not require grad; a
# leaf's complete gradient goes into its `.grad`.

# %% tags=["solution"]
def topological_order(root):
    """The nodes root depends on through nodes that require grad, parents first, root last: no recursion."""
    ### BEGIN SOLUTION
    order, seen = [], {id(root)}
    stack = [(root, iter(root.parents))]  # a node, and the parents it has yet to place
    while stack:
        node, parents = stack[-1]
        for parent in parents:
            if parent.requires_grad and id(parent) not in seen:
                seen.add(id(parent))
                stack.append((parent, iter(parent.parents)))
                break
        else:  # every parent placed: the node follows them
            stack.pop()
            order.append(node)
    return order
    ### END SOLUTION


def backward(root, upstream):
    """Reverse mode from root with dL/d(root) = upstream: each node after all its consumers, shares summed."""
    ### BEGIN SOLUTION
    grads = {id(root): upstream}
    for node in reversed(topological_order(root)):
        g = grads.pop(id(node))
        if node.vjp is None:  # a leaf that requires grad
            node.grad = g if node.grad is None else node.grad + g
            continue
        for parent, share in zip(node.parents, node.vjp(g)):
            if parent.requires_grad:
                key = id(parent)
                grads[key] = grads[key] + share if key in grads else share
    ### END SOLUTION


# %% [markdown]
# ## 2. Scalars
#
# Each operation computes its value and hands `result` a `vjp`: given `g = dL/d(out)`, it returns
# `dL/d(parent) = g * d(out)/d(parent)` for each parent. Write the vjp of each operation below (subtraction,
# negation and the reflected operators are built from them). `out` is the result's value where a vjp needs it.

# %% tags=["solution"]
class Value:
    """A float that records the operations applied to it."""

    def __init__(self, data, requires_grad=False):
        self.data = float(data)
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.parents = ()
        self.vjp = None

    def __repr__(self):
        return f"Value({self.data:g}, grad={self.grad})"

    @staticmethod
    def lift(other):
        return other if isinstance(other, Value) else Value(other)

    @staticmethod
    def result(data, parents, vjp):
        out = Value(data, requires_grad=any(p.requires_grad for p in parents))
        if out.requires_grad:
            out.parents, out.vjp = parents, vjp
        return out

    def __add__(self, other):
        other = Value.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return g, g
            ### END SOLUTION
        return Value.result(self.data + other.data, (self, other), vjp)

    def __mul__(self, other):
        other = Value.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return g * other.data, g * self.data
            ### END SOLUTION
        return Value.result(self.data * other.data, (self, other), vjp)

    def __truediv__(self, other):
        other = Value.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return g / other.data, -g * self.data / other.data ** 2
            ### END SOLUTION
        return Value.result(self.data / other.data, (self, other), vjp)

    def __pow__(self, p):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g * p * self.data ** (p - 1),)
            ### END SOLUTION
        return Value.result(self.data ** p, (self,), vjp)

    def exp(self):
        out = math.exp(self.data)

        def vjp(g):
            ### BEGIN SOLUTION
            return (g * out,)
            ### END SOLUTION
        return Value.result(out, (self,), vjp)

    def log(self):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g / self.data,)
            ### END SOLUTION
        return Value.result(math.log(self.data), (self,), vjp)

    def tanh(self):
        out = math.tanh(self.data)

        def vjp(g):
            ### BEGIN SOLUTION
            return (g * (1 - out * out),)
            ### END SOLUTION
        return Value.result(out, (self,), vjp)

    def relu(self):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g if self.data > 0 else 0.0,)
            ### END SOLUTION
        return Value.result(max(self.data, 0.0), (self,), vjp)

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-Value.lift(other))

    def __radd__(self, other):
        return Value.lift(other) + self

    def __rsub__(self, other):
        return Value.lift(other) - self

    def __rmul__(self, other):
        return Value.lift(other) * self

    def __rtruediv__(self, other):
        return Value.lift(other) / self

    def backward(self, upstream=1.0):
        backward(self, float(upstream))


# %% [markdown]
# ## 3. Tensors and broadcasting
#
# The same, over float64 numpy arrays. Broadcasting is where tensor autograd goes wrong: `x + b` with `x` of shape
# `(3, 4)` and `b` of shape `(4,)` uses each element of `b` three times, so its gradient is the sum of three
# shares, of shape `(4,)`. Write `unbroadcast(grad, shape)`, which sums a gradient back to an operand's shape, and
# use it in every elementwise vjp. Then the vjps of matmul, of a sum (each element summed receives the sum's
# gradient: put back the reduced axes when `keepdims` is False, then broadcast), of reshape and of transpose, and
# `Tensor.backward`, which checks `upstream` before calling `backward`.

# %% tags=["solution"]
def unbroadcast(grad, shape):
    """grad (a broadcast result's shape) summed back to an operand's shape: leading axes, then the axes of size 1."""
    ### BEGIN SOLUTION
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=ones, keepdims=True) if ones else grad
    ### END SOLUTION


def normalize_axes(axis, ndim):
    """A reduction's axis (None, an int or a tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted({int(a) % ndim for a in axes}))


class Tensor:
    """A float64 numpy array that records the operations applied to it."""

    def __init__(self, data, requires_grad=False):
        self.data = np.array(data, dtype=np.float64)
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.parents = ()
        self.vjp = None

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)

    def __repr__(self):
        return f"Tensor(shape={self.shape}, requires_grad={self.requires_grad})"

    @staticmethod
    def lift(other):
        return other if isinstance(other, Tensor) else Tensor(other)

    @staticmethod
    def result(data, parents, vjp):
        out = Tensor(data, requires_grad=any(p.requires_grad for p in parents))
        if out.requires_grad:
            out.parents, out.vjp = parents, vjp
        return out

    def __add__(self, other):
        a, b = self, Tensor.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return unbroadcast(g, a.shape), unbroadcast(g, b.shape)
            ### END SOLUTION
        return Tensor.result(a.data + b.data, (a, b), vjp)

    def __mul__(self, other):
        a, b = self, Tensor.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return unbroadcast(g * b.data, a.shape), unbroadcast(g * a.data, b.shape)
            ### END SOLUTION
        return Tensor.result(a.data * b.data, (a, b), vjp)

    def __truediv__(self, other):
        a, b = self, Tensor.lift(other)

        def vjp(g):
            ### BEGIN SOLUTION
            return unbroadcast(g / b.data, a.shape), unbroadcast(-g * a.data / b.data ** 2, b.shape)
            ### END SOLUTION
        return Tensor.result(a.data / b.data, (a, b), vjp)

    def __pow__(self, p):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g * p * self.data ** (p - 1),)
            ### END SOLUTION
        return Tensor.result(self.data ** p, (self,), vjp)

    def exp(self):
        out = np.exp(self.data)

        def vjp(g):
            ### BEGIN SOLUTION
            return (g * out,)
            ### END SOLUTION
        return Tensor.result(out, (self,), vjp)

    def log(self):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g / self.data,)
            ### END SOLUTION
        return Tensor.result(np.log(self.data), (self,), vjp)

    def tanh(self):
        out = np.tanh(self.data)

        def vjp(g):
            ### BEGIN SOLUTION
            return (g * (1 - out * out),)
            ### END SOLUTION
        return Tensor.result(out, (self,), vjp)

    def relu(self):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g * (self.data > 0),)
            ### END SOLUTION
        return Tensor.result(np.maximum(self.data, 0.0), (self,), vjp)

    def __matmul__(self, other):
        a, b = self, Tensor.lift(other)  # (m, k) @ (k, n)

        def vjp(g):  # g: (m, n)
            ### BEGIN SOLUTION
            return g @ b.data.T, a.data.T @ g
            ### END SOLUTION
        return Tensor.result(a.data @ b.data, (a, b), vjp)

    def sum(self, axis=None, keepdims=False):
        axes = normalize_axes(axis, self.ndim)

        def vjp(g):
            ### BEGIN SOLUTION
            if not keepdims:
                g = np.expand_dims(g, axes)
            return (np.broadcast_to(g, self.shape).copy(),)
            ### END SOLUTION
        return Tensor.result(self.data.sum(axis=axes, keepdims=keepdims), (self,), vjp)

    def mean(self, axis=None, keepdims=False):
        count = math.prod(self.shape[a] for a in normalize_axes(axis, self.ndim))
        return self.sum(axis, keepdims) * (1.0 / count)

    def reshape(self, shape):
        def vjp(g):
            ### BEGIN SOLUTION
            return (g.reshape(self.shape),)
            ### END SOLUTION
        return Tensor.result(self.data.reshape(shape), (self,), vjp)

    def transpose(self, axes=None):
        axes = tuple(range(self.ndim))[::-1] if axes is None else tuple(axes)

        def vjp(g):
            ### BEGIN SOLUTION
            return (g.transpose(np.argsort(axes)),)
            ### END SOLUTION
        return Tensor.result(self.data.transpose(axes), (self,), vjp)

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-Tensor.lift(other))

    def __radd__(self, other):
        return Tensor.lift(other) + self

    def __rsub__(self, other):
        return Tensor.lift(other) - self

    def __rmul__(self, other):
        return Tensor.lift(other) * self

    def __rtruediv__(self, other):
        return Tensor.lift(other) / self

    def backward(self, upstream):
        """Reverse mode from this tensor; ValueError naming upstream unless it is an array of self's shape."""
        ### BEGIN SOLUTION
        upstream = np.asarray(upstream)
        if upstream.shape != self.shape:
            raise ValueError(f"upstream must have the output's shape {self.shape}, got {upstream.shape}")
        backward(self, upstream.astype(np.float64))
        ### END SOLUTION


# %% [markdown]
# ## 4. Programs as data: what the checks call (given)
#
# A program is a list of nodes; node `i`'s value is referred to by its index, and the last node is the output:
# `{"op": "input", "index": k}` (leaf k), `{"op": "number", "value": x}` (a Python float),
# `{"op": "add" | "sub" | "mul" | "div" | "matmul", "args": [i, j]}`,
# `{"op": "neg" | "exp" | "log" | "tanh" | "relu", "args": [i]}`, `{"op": "pow", "args": [i], "exponent": p}`,
# `{"op": "sum" | "mean", "args": [i], "axis": ..., "keepdims": ...}`, `{"op": "reshape", "args": [i],
# "shape": [...]}`, `{"op": "transpose", "args": [i], "axes": None | [...]}`. `evaluate` maps each node onto the
# operators and methods of your classes, so `x * 2.5` and `2.5 * x` both occur. For example, the diamond
# `z = x * y; out = exp(z) * z + z`:

# %%
def evaluate(program, leaves):
    """The output of `program` computed with the operators and methods of `leaves` (Values or Tensors)."""
    values = []
    for node in program:
        op = node["op"]
        args = [values[i] for i in node.get("args", [])]
        if op == "input":
            value = leaves[node["index"]]
        elif op == "number":
            value = float(node["value"])
        elif op in ("add", "sub", "mul", "div", "matmul"):
            a, b = args
            value = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
                     "matmul": lambda: a @ b}[op]()
        elif op == "neg":
            value = -args[0]
        elif op in ("exp", "log", "tanh", "relu"):
            value = getattr(args[0], op)()
        elif op == "pow":
            value = args[0] ** node["exponent"]
        elif op in ("sum", "mean"):
            axis = node.get("axis")
            axis = tuple(axis) if isinstance(axis, list) else axis
            value = getattr(args[0], op)(axis=axis, keepdims=bool(node.get("keepdims", False)))
        elif op == "reshape":
            value = args[0].reshape(tuple(node["shape"]))
        elif op == "transpose":
            value = args[0].transpose(None if node.get("axes") is None else tuple(node["axes"]))
        else:
            raise ValueError(f"unknown op {op!r}")
        values.append(value)
    return values[-1]


def gradients(program, inputs, requires_grad, upstream):
    """Tensors from inputs (float64 arrays), the program on them, backward with upstream: output and each .grad."""
    leaves = [Tensor(x, requires_grad=r) for x, r in zip(inputs, requires_grad)]
    out = evaluate(program, leaves)
    out.backward(upstream)
    return {"output": out.data, "grads": [leaf.grad for leaf in leaves]}


def scalar_gradients(program, inputs, requires_grad, upstream):
    """The same on Values: inputs and upstream are numbers."""
    leaves = [Value(x, requires_grad=r) for x, r in zip(inputs, requires_grad)]
    out = evaluate(program, leaves)
    out.backward(upstream)
    return {"output": out.data, "grads": [leaf.grad for leaf in leaves]}


def chain_gradients(ops, length, x, upstream):
    """A chain of `length` unary operations on x (a number: Values; an array: Tensors), node i applying
    ops[i % len(ops)], differentiated as gradients does: built here, as it is long."""
    program = [{"op": "input", "index": 0}] + [{"op": ops[i % len(ops)], "args": [i]} for i in range(length)]
    collecting = gc.isenabled()
    gc.disable()  # Python's cycle collector would rescan the growing graph many times over, freeing nothing
    try:
        if isinstance(x, (int, float)):
            return scalar_gradients(program, [x], [True], upstream)
        return gradients(program, [x], [True], upstream)
    finally:
        if collecting:
            gc.enable()


def backward_error(program, inputs, requires_grad, upstream):
    """[kind, message] of the error gradients(...) raises ("ValueError" or "other"), or None if it returns."""
    try:
        gradients(program, inputs, requires_grad, upstream)
    except NotImplementedError:
        raise
    except ValueError as error:
        return ["ValueError", str(error)]
    except Exception as error:  # any other error is reported, and judged by the check
        return ["other", f"{type(error).__name__}: {error}"]
    return None


DIAMOND = [{"op": "input", "index": 0}, {"op": "input", "index": 1}, {"op": "mul", "args": [0, 1]},
           {"op": "exp", "args": [2]}, {"op": "mul", "args": [3, 2]}, {"op": "add", "args": [4, 2]}]
# try it once your classes work: scalar_gradients(DIAMOND, [1.5, -0.5], [True, True], 2.0)

# %% [markdown]
# ## 5. The checks
#
# `value_rules`: one operation at a time on Values, numbers on either side. `value_graphs`: diamonds and values
# used many times. `tensor_rules`: one operation at a time on tensors of equal shapes, sums and means over every
# axis with and without `keepdims`, matmul, reshape, transpose; gradients float64 of their operand's shape.
# `broadcasting`: elementwise operations on shapes that broadcast in every way (a scalar, a row, a column,
# `(1, n)` against `(m, 1)`, a missing leading axis). `tensor_graphs`: a 2-layer network and random programs,
# judged against torch and by the dot-product identity $\langle v, J u\rangle = \langle J^\top v, u\rangle$
# (J u from `torch.func.jvp`). `long_chain`: 10,000 operations in a row (`chain_gradients`, given, builds the
# chain). `constants`: leaves with `requires_grad=False` keep `.grad` None. `upstream`: an upstream gradient of
# the wrong shape is refused.

# %% tags=["check"]
check("value_rules")
### BEGIN HIDDEN TESTS
check("value_rules", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("value_graphs")
### BEGIN HIDDEN TESTS
check("value_graphs", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("tensor_rules")
### BEGIN HIDDEN TESTS
check("tensor_rules", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("broadcasting")
### BEGIN HIDDEN TESTS
check("broadcasting", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("tensor_graphs")
### BEGIN HIDDEN TESTS
check("tensor_graphs", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("long_chain")
### BEGIN HIDDEN TESTS
check("long_chain", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("constants")
### BEGIN HIDDEN TESTS
check("constants", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("upstream")
### BEGIN HIDDEN TESTS
check("upstream", hidden=True)
### END HIDDEN TESTS
