"""A small reverse-mode automatic differentiation engine: a scalar Value and a numpy Tensor (float64) that record a
tape by operator overloading, `backward` walking it in topological order; and forward mode (Dual numbers) beside it.

Every operation computes its result and attaches `vjp`, a function from the gradient of the result g = dL/d(out) to
one gradient per parent, dL/d(parent) = g . d(out)/d(parent) (a vector-Jacobian product). `backward(root, upstream)`
visits the nodes so that each one's gradient is complete (summed over all of its consumers) before its vjp runs, and
adds the gradients of leaves into their `.grad`. A value made with requires_grad=False is a constant: no node
records anything for it, and its `.grad` stays None. This is the design of micrograd's engine.py, MiniTorch's
`Scalar`/`Tensor` and CMU needle's `Value`, written from scratch here with an iterative topological order.
"""

import math

import numpy as np

from aisys import _validate


# --- the tape: topological order and backward, shared by Value and Tensor ---------------------------------------

def topological_order(root) -> list:
    """The nodes `root` depends on through values that require grad, each after all of its parents (root last).

    A depth-first search in post-order with an explicit stack of (node, iterator over its parents): no recursion, so
    a chain of any length works (a recursive search stops at Python's recursion limit, about a thousand frames).
    """
    order, seen = [], {id(root)}
    stack = [(root, iter(root.parents))]
    while stack:
        node, parents = stack[-1]
        for parent in parents:
            if parent.requires_grad and id(parent) not in seen:
                seen.add(id(parent))
                stack.append((parent, iter(parent.parents)))
                break  # descend first; this node resumes its iterator later
        else:  # every parent is placed: the node can follow them
            stack.pop()
            order.append(node)
    return order


def backward(root, upstream) -> None:
    """Reverse mode from `root` with dL/d(root) = `upstream`: add dL/d(leaf) into `.grad` of every leaf that requires
    grad (starting from None). Intermediate gradients live in a dictionary for this call only."""
    if not root.requires_grad:
        raise ValueError("backward: the output does not depend on any value with requires_grad=True")
    grads = {id(root): upstream}
    for node in reversed(topological_order(root)):  # every consumer of a node comes before it
        g = grads.pop(id(node))  # complete: all of its consumers have added their share
        if node.vjp is None:  # a leaf: accumulate, as torch does across calls
            node.grad = g if node.grad is None else node.grad + g
            continue
        for parent, parent_grad in zip(node.parents, node.vjp(g), strict=True):
            if parent.requires_grad:  # constants get nothing
                key = id(parent)
                grads[key] = grads[key] + parent_grad if key in grads else parent_grad  # several uses add up


# --- scalars ------------------------------------------------------------------------------------------------------

class Value:
    """A float that records the operations applied to it (micrograd's Value)."""

    def __init__(self, data, requires_grad: bool = False):
        self.data = float(data)
        self.requires_grad = bool(requires_grad)
        self.grad = None  # dL/d(self) after backward, for a leaf that requires grad
        self.parents = ()  # the Values this one was computed from
        self.vjp = None  # g -> (dL/d(parent) for each parent); None for a leaf

    def __repr__(self) -> str:
        return f"Value({self.data:g}, grad={self.grad})"

    @staticmethod
    def lift(other) -> "Value":
        """A Value as it is, a number as a constant Value."""
        return other if isinstance(other, Value) else Value(other)

    @staticmethod
    def result(data: float, parents: tuple, vjp) -> "Value":
        """The Value of an operation: it requires grad when a parent does, and only then records its parents."""
        out = Value(data, requires_grad=any(p.requires_grad for p in parents))
        if out.requires_grad:
            out.parents, out.vjp = parents, vjp
        return out

    def __add__(self, other):
        other = Value.lift(other)
        return Value.result(self.data + other.data, (self, other), lambda g: (g, g))

    def __mul__(self, other):
        other = Value.lift(other)
        return Value.result(self.data * other.data, (self, other), lambda g: (g * other.data, g * self.data))

    def __truediv__(self, other):
        other = Value.lift(other)
        return Value.result(self.data / other.data, (self, other),
                            lambda g: (g / other.data, -g * self.data / other.data ** 2))

    def __pow__(self, exponent):
        if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
            raise TypeError(f"exponent must be a number (a constant), got {type(exponent).__name__}")
        return Value.result(self.data ** exponent, (self,),
                            lambda g: (g * exponent * self.data ** (exponent - 1),))

    def exp(self):
        out = math.exp(self.data)
        return Value.result(out, (self,), lambda g: (g * out,))

    def log(self):
        return Value.result(math.log(self.data), (self,), lambda g: (g / self.data,))

    def tanh(self):
        out = math.tanh(self.data)
        return Value.result(out, (self,), lambda g: (g * (1 - out * out),))

    def relu(self):
        return Value.result(max(self.data, 0.0), (self,), lambda g: (g * (self.data > 0),))

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

    def backward(self, upstream=1.0) -> None:
        """Reverse mode from this Value with dL/d(self) = upstream, a number."""
        if isinstance(upstream, bool) or not isinstance(upstream, (int, float, np.floating, np.integer)):
            raise ValueError(f"upstream must be a number (the gradient of a scalar output), got "
                             f"{type(upstream).__name__}")
        backward(self, float(upstream))


# --- tensors ------------------------------------------------------------------------------------------------------

def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """`grad`, of a broadcast result's shape, summed back to an operand's `shape`: over the leading axes broadcasting
    prepended, then over each axis where the operand had 1 (kept, as size 1)."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))  # (2, 3, 4) -> (3, 4) for an operand of (3, 4)
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=ones, keepdims=True) if ones else grad  # (3, 4) -> (3, 1) for an operand of (3, 1)


def normalize_axes(axis, ndim: int) -> tuple:
    """`axis` of a reduction (None, an int or a sequence of ints, negative ones counting from the end) as a sorted
    tuple of distinct non-negative axes; None means every axis."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) else tuple(axis)
    if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) and -ndim <= a < ndim for a in axes):
        raise ValueError(f"axis must be None, an int or a sequence of ints in [-{ndim}, {ndim}), got {axis!r}")
    axes = tuple(sorted({int(a) % ndim for a in axes}))
    return axes


class Tensor:
    """A float64 numpy array that records the operations applied to it; broadcasting as numpy's."""

    def __init__(self, data, requires_grad: bool = False):
        self.data = np.array(data, dtype=np.float64)  # a copy: the tape must not see later writes
        self.requires_grad = bool(requires_grad)
        self.grad = None  # dL/d(self), of self's shape, after backward
        self.parents = ()
        self.vjp = None

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, requires_grad={self.requires_grad})"

    @staticmethod
    def lift(other) -> "Tensor":
        return other if isinstance(other, Tensor) else Tensor(other)

    @staticmethod
    def result(data, parents: tuple, vjp) -> "Tensor":
        out = Tensor(data, requires_grad=any(p.requires_grad for p in parents))
        if out.requires_grad:
            out.parents, out.vjp = parents, vjp
        return out

    # elementwise, with broadcasting: each gradient is summed back to its operand's shape
    def __add__(self, other):
        a, b = self, Tensor.lift(other)
        return Tensor.result(a.data + b.data, (a, b), lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape)))

    def __mul__(self, other):
        a, b = self, Tensor.lift(other)
        return Tensor.result(a.data * b.data, (a, b),
                             lambda g: (unbroadcast(g * b.data, a.shape), unbroadcast(g * a.data, b.shape)))

    def __truediv__(self, other):
        a, b = self, Tensor.lift(other)
        return Tensor.result(a.data / b.data, (a, b),
                             lambda g: (unbroadcast(g / b.data, a.shape),
                                        unbroadcast(-g * a.data / b.data ** 2, b.shape)))

    def __pow__(self, exponent):
        if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
            raise TypeError(f"exponent must be a number (a constant), got {type(exponent).__name__}")
        return Tensor.result(self.data ** exponent, (self,),
                             lambda g: (g * exponent * self.data ** (exponent - 1),))

    def exp(self):
        out = np.exp(self.data)
        return Tensor.result(out, (self,), lambda g: (g * out,))

    def log(self):
        return Tensor.result(np.log(self.data), (self,), lambda g: (g / self.data,))

    def tanh(self):
        out = np.tanh(self.data)
        return Tensor.result(out, (self,), lambda g: (g * (1 - out * out),))

    def relu(self):
        return Tensor.result(np.maximum(self.data, 0.0), (self,), lambda g: (g * (self.data > 0),))

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

    def __matmul__(self, other):
        a, b = self, Tensor.lift(other)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"matmul takes (m, k) @ (k, n) arrays, got {a.shape} @ {b.shape}")
        return Tensor.result(a.data @ b.data, (a, b), lambda g: (g @ b.data.T, a.data.T @ g))  # (m,n)(n,k), (k,m)(m,n)

    # reductions and shapes
    def sum(self, axis=None, keepdims: bool = False):
        axes = normalize_axes(axis, self.ndim)

        def vjp(g):
            if not keepdims:
                g = np.expand_dims(g, axes)  # put the summed axes back, as size 1
            return (np.broadcast_to(g, self.shape).copy(),)  # every element summed gets the sum's gradient
        return Tensor.result(self.data.sum(axis=axes, keepdims=keepdims), (self,), vjp)

    def mean(self, axis=None, keepdims: bool = False):
        count = math.prod(self.shape[a] for a in normalize_axes(axis, self.ndim))
        return self.sum(axis, keepdims) * (1.0 / count)

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        return Tensor.result(self.data.reshape(shape), (self,), lambda g: (g.reshape(self.shape),))

    def transpose(self, axes=None):
        axes = tuple(range(self.ndim))[::-1] if axes is None else tuple(axes)
        return Tensor.result(self.data.transpose(axes), (self,), lambda g: (g.transpose(np.argsort(axes)),))

    @property
    def T(self):
        return self.transpose()

    def backward(self, upstream=None) -> None:
        """Reverse mode from this Tensor with dL/d(self) = upstream, an array of self's shape (None only for a
        single-element output, meaning 1)."""
        if upstream is None and self.size == 1:
            upstream = np.ones(self.shape)
        array = np.asarray(upstream) if upstream is not None else None
        if array is None or array.shape != self.shape or array.dtype.kind not in "fiu":
            got = "None" if array is None else f"{array.dtype} of shape {array.shape}"
            raise ValueError(f"upstream must be an array of numbers of the output's shape {self.shape}, got {got}")
        backward(self, array.astype(np.float64))


def gradient(f, *inputs, upstream=None) -> tuple:
    """f(*tensors)'s value and the vector-Jacobian product upstream^T J for each input (one reverse pass)."""
    leaves = [Tensor(x, requires_grad=True) for x in inputs]
    out = f(*leaves)
    out.backward(upstream)
    return out.data, tuple(leaf.grad for leaf in leaves)


# --- forward mode ---------------------------------------------------------------------------------------------------

class Dual:
    """Forward mode: a value and its tangent (its derivative along the inputs' tangents) carried together, as dual
    numbers a + b·ε with ε² = 0. One forward pass gives one Jacobian-vector product J u."""

    def __init__(self, primal, tangent=None):
        self.primal = np.asarray(primal, dtype=np.float64)
        self.tangent = np.zeros_like(self.primal) if tangent is None else np.asarray(tangent, dtype=np.float64)

    @staticmethod
    def lift(other) -> "Dual":
        return other if isinstance(other, Dual) else Dual(other)

    def __add__(self, other):
        o = Dual.lift(other)
        return Dual(self.primal + o.primal, self.tangent + o.tangent)

    def __mul__(self, other):
        o = Dual.lift(other)
        return Dual(self.primal * o.primal, self.tangent * o.primal + self.primal * o.tangent)

    def __truediv__(self, other):
        o = Dual.lift(other)
        return Dual(self.primal / o.primal, (self.tangent * o.primal - self.primal * o.tangent) / o.primal ** 2)

    def __pow__(self, exponent):
        return Dual(self.primal ** exponent, exponent * self.primal ** (exponent - 1) * self.tangent)

    def exp(self):
        out = np.exp(self.primal)
        return Dual(out, out * self.tangent)

    def log(self):
        return Dual(np.log(self.primal), self.tangent / self.primal)

    def tanh(self):
        out = np.tanh(self.primal)
        return Dual(out, (1 - out * out) * self.tangent)

    def relu(self):
        return Dual(np.maximum(self.primal, 0.0), self.tangent * (self.primal > 0))

    def __matmul__(self, other):
        o = Dual.lift(other)
        return Dual(self.primal @ o.primal, self.tangent @ o.primal + self.primal @ o.tangent)

    def sum(self, axis=None, keepdims: bool = False):
        axes = normalize_axes(axis, self.primal.ndim)
        return Dual(self.primal.sum(axis=axes, keepdims=keepdims), self.tangent.sum(axis=axes, keepdims=keepdims))

    def mean(self, axis=None, keepdims: bool = False):
        count = math.prod(self.primal.shape[a] for a in normalize_axes(axis, self.primal.ndim))
        return self.sum(axis, keepdims) * (1.0 / count)

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        return Dual(self.primal.reshape(shape), self.tangent.reshape(shape))

    def transpose(self, axes=None):
        return Dual(self.primal.transpose(axes), self.tangent.transpose(axes))

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-Dual.lift(other))

    def __radd__(self, other):
        return Dual.lift(other) + self

    def __rsub__(self, other):
        return Dual.lift(other) - self

    def __rmul__(self, other):
        return Dual.lift(other) * self

    def __rtruediv__(self, other):
        return Dual.lift(other) / self


def jvp(f, primals, tangents) -> tuple:
    """(f(*primals), J u): one forward pass of f on dual numbers, u being `tangents` (one per primal, same shapes)."""
    if len(primals) != len(tangents):
        raise ValueError(f"tangents must hold one array per primal ({len(primals)}), got {len(tangents)}")
    duals = []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        p = np.asarray(p, dtype=np.float64)
        if np.shape(t) != p.shape:
            raise ValueError(f"tangents[{i}] must have its primal's shape {p.shape}, got {np.shape(t)}")
        duals.append(Dual(p, t))
    out = f(*duals)
    return out.primal, out.tangent


def jacobian_forward(f, x) -> np.ndarray:
    """The Jacobian (m, n) of f: R^n -> R^m at x, column by column: n forward passes (JVPs with unit tangents)."""
    x = _validate.finite_array("x", x, ndim=1)
    units = np.eye(x.size)
    columns = [jvp(f, [x], [units[j]])[1] for j in range(x.size)]
    return np.stack(columns, axis=1)


def jacobian_reverse(f, x) -> np.ndarray:
    """The Jacobian (m, n) of f: R^n -> R^m at x, row by row: m reverse passes (VJPs with unit upstreams)."""
    x = _validate.finite_array("x", x, ndim=1)
    m = np.asarray(f(Tensor(x)).data).size
    units = np.eye(m)
    rows = [gradient(f, x, upstream=units[i])[1][0] for i in range(m)]
    return np.stack(rows, axis=0)
