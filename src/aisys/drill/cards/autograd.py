"""Automatic differentiation: forward against reverse mode for a Jacobian, gradients of broadcast operands, shares
summed in a diamond, recursion in a topological sort, the best finite-difference step, saved activations and where
JAX's tracing sits (aisys.autograd.engine)."""

import sys

import numpy as np

from aisys.autograd import engine
from aisys.autograd.engine import Tensor, Value

from ..card import Ask, Choice, Number, card

PAGE = "04-autograd/autodiff"


@card(topic="autograd and compilers", difficulty="easy", frequency="high", page=PAGE)
def jacobian_passes():
    n, m = 1000, 10
    counted = {"reverse": 0}

    def f(x):  # R^n -> R^m, counting the reverse passes (each one runs f on Tensors)
        counted["reverse"] += isinstance(x, Tensor)
        return (x.reshape((m, n // m))).tanh().sum(axis=1)
    engine.jacobian_reverse(f, np.linspace(-1, 1, n))
    passes = counted["reverse"] - 1  # one more call only reads the output's size
    return Ask(
        f"f maps R^{n} to R^{m}. How many reverse-mode passes (vector-Jacobian products) build its full Jacobian?",
        Number(passes, rel=0.001),
        f"A VJP v^T J gives one row of the {m} x {n} Jacobian for v = e_i: {passes} passes, one per output (counted "
        f"here on aisys's engine). Forward mode gives one column per JVP and would need {n}. For a loss (m = 1) "
        "reverse mode gives the whole gradient in one pass: why training uses it.")


@card(topic="autograd and compilers", difficulty="easy", frequency="high", page=PAGE)
def forward_mode_for_few_inputs():
    n, m = 3, 1000
    options = (f"forward mode: {n} JVPs", f"reverse mode: {m} VJPs", "either: both need n x m passes",
               "neither: only finite differences give a full Jacobian")
    return Ask(f"To build the full Jacobian of f: R^{n} -> R^{m}, which mode needs fewer passes?",
               Choice(options, 0),
               f"A JVP J u gives one column, a VJP v^T J one row: {n} columns against {m} rows. Forward mode wins "
               "whenever there are fewer inputs than outputs; reverse mode for a scalar loss of many parameters.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def broadcast_bias_gradient():
    batch, width = 32, 64
    x = Tensor(np.zeros((batch, width)), requires_grad=True)
    b = Tensor(np.zeros(width), requires_grad=True)
    (x + b).backward(np.ones((batch, width)))
    return Ask(
        f"y = x + b with x of shape ({batch}, {width}) and a bias b of shape ({width},), broadcast over the rows. "
        "With an upstream gradient of ones, what is each element of b's gradient?",
        Number(float(b.grad[0]), rel=0.001),
        f"b is used once per row, so its gradient sums the {batch} rows' shares: {b.grad[0]:g} each, shape "
        f"{b.grad.shape} like b (aisys's engine gives that). Returning the ({batch}, {width}) gradient unsummed is "
        "the usual bug: the shape no longer matches the operand.")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def diamond_gradient():
    x, y = Value(2, requires_grad=True), Value(3, requires_grad=True)
    z = x * y
    (z * z + z).backward()
    return Ask(
        f"z = x * y and out = z * z + z, with x = {x.data:g}, y = {y.data:g}. What is d out / d x?",
        Number(x.grad, rel=0.001),
        f"z is used three times (twice in z * z, once alone), so its gradient is the sum 2z + 1 = "
        f"{2 * z.data + 1:g}, and d out/dx = (2z + 1) y = {x.grad:g}. A backward that assigns instead of adding "
        "keeps only one of the shares: summing the shares of every use is what reverse mode requires.")


@card(topic="autograd and compilers", difficulty="medium", frequency="medium", page=PAGE)
def recursive_topological_sort():
    limit = sys.getrecursionlimit()
    options = ("a recursive depth-first search uses one Python frame per node and hits the recursion limit",
               "a topological order does not exist for a chain",
               "the gradients underflow after that many steps",
               "reverse mode needs memory quadratic in the depth")
    return Ask("micrograd's backward builds its topological order with a recursive function. Why does it fail on "
               "a chain of 10,000 operations?",
               Choice(options, 0),
               f"build_topo recurses into each parent, so a chain is as deep in Python frames as it is long; the "
               f"limit is {limit:,} frames here, and RecursionError follows. An explicit stack (iterative "
               "post-order DFS) or Kahn's algorithm does the same in a loop, linear in the graph's size.")


@card(topic="autograd and compilers", difficulty="hard", frequency="medium", page=PAGE)
def central_difference_step():
    eps = np.finfo(np.float64).eps
    steps = (eps, np.sqrt(eps), np.cbrt(eps), np.sqrt(np.cbrt(eps)))
    options = tuple(f"about {h:.0e}" for h in steps)
    return Ask("A central difference (f(x+h) - f(x-h)) / 2h in float64, on a smooth f with f and f''' of order 1: "
               "which step h gives the smallest error?",
               Choice(options, 2),
               f"The truncation error grows as h^2 f'''/6, the round-off as eps |f| / h (eps = {eps:.1e}): their sum "
               f"is smallest at h of order eps^(1/3) = {np.cbrt(eps):.1e}, with an error of order eps^(2/3) = "
               f"{np.cbrt(eps) ** 2:.0e}. sqrt(eps) is the best step of the one-sided forward difference, whose "
               "truncation error is only O(h).")


@card(topic="autograd and compilers", difficulty="medium", frequency="high", page=PAGE)
def saved_activation_bytes():
    batch, width, itemsize = 4096, 8192, np.dtype(np.float16).itemsize  # bf16 has float16's 2 bytes
    saved = batch * width * itemsize
    return Ask(
        f"In training, a ReLU runs on a bf16 activation of {batch} tokens x {width} features. How many bytes does it "
        "save for the backward pass (in MiB)?",
        Number(saved / 2**20, rel=0.01),
        f"ReLU's backward needs to know where its input was positive; PyTorch saves its output: {batch} x {width} x "
        f"{itemsize} bytes = {saved / 2**20:g} MiB, held from the forward pass until the backward pass uses it. "
        "Summed over every layer, this is the activation memory that checkpointing trades for recomputation "
        "(measure it with torch.autograd.graph.saved_tensors_hooks).")


@card(topic="autograd and compilers", difficulty="hard", frequency="medium", page=PAGE)
def jax_tracing_between():
    options = ("it captures the program by overloading (tracers) into a jaxpr, then differentiates by transforming "
               "that IR (linearise, then transpose)",
               "it records a tape of values at run time and walks it backwards, as PyTorch's autograd does",
               "it rewrites the Python source text into a derivative function, as Tangent does",
               "it differentiates numerically with complex steps")
    return Ask("Where does JAX's autodiff sit between operator overloading and source transformation?",
               Choice(options, 0),
               "jax.grad runs the function on tracer objects (operator overloading) and records a jaxpr, a typed "
               "functional IR; reverse mode linearises the JVP into a linear jaxpr and transposes it (Radul et al., "
               "POPL 2023). Python control flow is fixed at trace time; lax.cond and lax.scan put it in the IR.")
