"""The reverse-mode engine (aisys.autograd.engine) and its programs as plain data, against torch.autograd in float64."""

import numpy as np
import pytest
import torch

from aisys.autograd import engine, programs
from aisys.autograd.engine import Dual, Tensor, Value, topological_order, unbroadcast

TOL = dict(rtol=1e-10, atol=1e-12)  # float64, the same formulas as torch's: only libm's last bits differ


def _same(mine: dict, torchs: dict):
    np.testing.assert_allclose(mine["output"], torchs["output"], **TOL)
    for got, want in zip(mine["grads"], torchs["grads"], strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert np.shape(got) == np.shape(want)
            assert np.asarray(got).dtype == np.float64
            np.testing.assert_allclose(got, want, **TOL)


SHAPES = [[(3, 4), (3, 4)], [(3, 4), (4,)], [(3, 1), (1, 4)], [(2, 3, 4), (3, 1)], [(), (2, 3)], [(1, 4), (3, 1)]]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_ops_broadcast_and_sum_back_to_each_operand(op, shapes):
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0.5, 2, s) * rng.choice([-1, 1], s) for s in shapes]
    program = [{"op": "input", "index": 0}, {"op": "input", "index": 1}, {"op": op, "args": [0, 1]}]
    upstream = rng.standard_normal(np.broadcast_shapes(*shapes))
    _same(programs.gradients(program, inputs, [True, True], upstream),
          programs.torch_gradients(program, inputs, [True, True], upstream))


@pytest.mark.parametrize("node", [{"op": "exp"}, {"op": "log"}, {"op": "tanh"}, {"op": "relu"}, {"op": "neg"},
                                  {"op": "pow", "exponent": 3}, {"op": "pow", "exponent": -1.0},
                                  {"op": "pow", "exponent": 0.5}, {"op": "sum", "axis": None},
                                  {"op": "sum", "axis": 1, "keepdims": False}, {"op": "sum", "axis": [0, 2]},
                                  {"op": "mean", "axis": -1, "keepdims": True}, {"op": "mean", "axis": None},
                                  {"op": "reshape", "shape": [6, 4]}, {"op": "transpose", "axes": None},
                                  {"op": "transpose", "axes": [1, 0, 2]}], ids=str)
def test_unary_ops_match_torch(node):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.2, 2, (2, 3, 4)) * (1 if node["op"] in ("log", "pow") else rng.choice([-1, 1], (2, 3, 4)))
    program = [{"op": "input", "index": 0}, {**node, "args": [0]}]
    upstream = rng.standard_normal(programs.forward(program, [x]).shape)
    _same(programs.gradients(program, [x], [True], upstream), programs.torch_gradients(program, [x], [True], upstream))


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 2)], [(1, 5), (5, 1)], [(5, 1), (1, 5)], [(4, 4), (4, 4)]], ids=str)
def test_matmul_gradients_are_g_bT_and_aT_g(shapes):
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s) for s in shapes]
    program = [{"op": "input", "index": 0}, {"op": "input", "index": 1}, {"op": "matmul", "args": [0, 1]}]
    upstream = rng.standard_normal((shapes[0][0], shapes[1][1]))
    _same(programs.gradients(program, inputs, [True, True], upstream),
          programs.torch_gradients(program, inputs, [True, True], upstream))


def test_unbroadcast_sums_leading_axes_and_keeps_ones():
    g = np.arange(24.0).reshape(2, 3, 4)
    assert unbroadcast(g, (3, 4)).shape == (3, 4)
    np.testing.assert_array_equal(unbroadcast(g, (3, 1)), g.sum(axis=(0, 2))[:, None])
    np.testing.assert_array_equal(unbroadcast(g, ()), g.sum())
    np.testing.assert_array_equal(unbroadcast(g, (1, 1, 4)), g.sum(axis=(0, 1), keepdims=True))


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_torch(seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s) for s in [(3, 4), (4,), (3, 1), (4, 2), ()]]
    requires = [True, True, bool(seed % 2), True, False]
    program = programs.random_program(rng, inputs, nodes=14)
    upstream = rng.standard_normal(programs.forward(program, inputs).shape)
    _same(programs.gradients(program, inputs, requires, upstream),
          programs.torch_gradients(program, inputs, requires, upstream))


@pytest.mark.parametrize("seed", range(8))
def test_scalar_programs_match_torch(seed):
    rng = np.random.default_rng(100 + seed)
    inputs = [float(v) for v in rng.uniform(0.5, 2, 3)]
    program = programs.random_program(rng, inputs, nodes=12)
    _same(programs.scalar_gradients(program, inputs, [True, False, True], 0.75),
          programs.torch_gradients(program, inputs, [True, False, True], 0.75))


def test_diamond_accumulates_every_path():
    x, y = Value(1.5, requires_grad=True), Value(-0.5, requires_grad=True)
    z = x * y
    (z.exp() * z + z).backward(2.0)
    dz = 2.0 * (np.exp(-0.75) * (-0.75) + np.exp(-0.75) + 1)
    assert x.grad == pytest.approx(dz * -0.5) and y.grad == pytest.approx(dz * 1.5)
    result = programs.scalar_gradients(programs.diamond(), [1.5, -0.5], [True, True], 2.0)
    assert result["grads"] == pytest.approx([x.grad, y.grad])


def test_a_chain_of_ten_thousand_nodes_needs_no_recursion():
    x = np.array([0.3, -2.0])
    up = np.array([1.5, -0.4])
    result = programs.gradients(programs.chain(10_000), [x], [True], up)
    output, grad = programs.chain_gradient(x, up, 10_000)
    np.testing.assert_allclose(result["output"], output, rtol=1e-9)
    np.testing.assert_allclose(result["grads"][0], grad, rtol=1e-9)
    scalar = programs.scalar_gradients(programs.chain(10_001), [0.7], [True], 0.5)
    assert scalar["grads"][0] == pytest.approx(programs.chain_gradient(0.7, 0.5, 10_001)[1], rel=1e-9)


def test_topological_order_puts_parents_first():
    a = Value(1.0, requires_grad=True)
    b = a * 2.0
    c = b + a
    d = c * b
    order = topological_order(d)
    assert order.index(a) < order.index(b) < order.index(c) < order.index(d) and order[-1] is d


def test_constants_get_no_gradient_and_leaves_accumulate_across_calls():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    c = Tensor(np.full((3,), 2.0))
    (x * c).sum().backward()
    (x * c).sum().backward()
    assert c.grad is None and c.parents == ()
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 4.0))


def test_backward_refuses_an_upstream_of_the_wrong_shape():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match="upstream"):
        (x * 2.0).backward(np.ones((3, 2)))
    with pytest.raises(ValueError, match="upstream"):
        (x * 2.0).backward()
    with pytest.raises(ValueError, match="upstream"):
        (Value(1.0, requires_grad=True) * 2.0).backward(np.ones(2))
    with pytest.raises(ValueError, match="requires_grad"):
        Tensor(np.ones(2)).sum().backward()


def test_forward_mode_matches_torch_jvp_and_the_dot_product_identity():
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(s) for s in [(3, 4), (4,), (4, 2)]]
    program = programs.random_program(rng, inputs, nodes=12)
    tangents = [rng.standard_normal(np.shape(x)) for x in inputs]
    _, mine = engine.jvp(lambda *xs: programs.evaluate(program, list(xs)), inputs, tangents)
    np.testing.assert_allclose(mine, programs.torch_jvp(program, inputs, [True] * 3, tangents), **TOL)
    v = rng.standard_normal(np.shape(mine))
    grads = programs.gradients(program, inputs, [True] * 3, v)["grads"]
    assert np.vdot(v, mine) == pytest.approx(sum(np.vdot(g, u) for g, u in zip(grads, tangents)), rel=1e-10)


def test_jacobians_forward_and_reverse_agree_with_torch():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 5))

    def f(x):
        return (Tensor(w) @ x.reshape((5, 1))).tanh().reshape((3,)) if isinstance(x, Tensor) else \
            (Dual(w) @ x.reshape((5, 1))).tanh().reshape((3,))
    x = rng.standard_normal(5)
    expected = torch.autograd.functional.jacobian(lambda t: torch.tanh(torch.tensor(w) @ t), torch.tensor(x)).numpy()
    np.testing.assert_allclose(engine.jacobian_forward(f, x), expected, **TOL)
    np.testing.assert_allclose(engine.jacobian_reverse(f, x), expected, **TOL)
