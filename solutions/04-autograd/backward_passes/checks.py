"""Checks: hand-written backward passes, each gradient judged on every element against central finite differences of
the forward (aisys.autograd.backward's forwards, which tests/test_autograd_backward.py holds to torch) and against
aisys.autograd.backward's gradients (torch.autograd's, in float64), always with a random upstream gradient.

Visible cases are a few small fixed shapes. Hidden cases add, on every seed: size-1 axes (one row, one element, one
key), constant rows, a large eps, T != S attention, 1 x 1 and whole-image kernels, strides above and below the kernel,
padding of 2, a different ignore_index and every row ignored, logits of magnitude 1e3, BatchNorm over two samples.
Tensors hold at most ~100 elements: finite differences cost two forwards per element, cached per case.
"""

import hashlib
import pickle

import numpy as np

from aisys.autograd import backward as bw
from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format

# Central differences in float64 with h = 1e-6: truncation error ~h^2 = 1e-12, rounding ~1e-16 |L| / h <= 1e-7 for
# losses up to |L| ~ 1e3 (the large-logit cases); the step is taken as (a + h) - (a - h) as rounded, so the rounding of
# a + h near 1e3 does not count. A real mistake is off by far more than these tolerances.
H = 1e-6
NUMERIC = (1e-5, 1e-6)
# Against the reference: both float64, the same formulas summed in other orders; only rounding differs.
REFERENCE = (1e-8, 1e-10)

_cache: dict[str, list[np.ndarray]] = {}  # central differences depend on the case only, never on the student


def _central_differences(loss, variables: dict) -> list[np.ndarray]:
    """d loss / d variable, every element of every variable, by central differences."""
    key = hashlib.sha256(pickle.dumps((loss.__qualname__, variables, loss.__defaults__))).hexdigest()
    if key not in _cache:
        grads = []
        for name, value in variables.items():
            grad = np.zeros_like(value)
            for index in np.ndindex(value.shape):
                plus, minus = value.copy(), value.copy()
                plus[index] += H
                minus[index] -= H
                grad[index] = ((loss(**{**variables, name: plus}) - loss(**{**variables, name: minus}))
                               / (plus[index] - minus[index]))
            grads.append(grad)
        _cache[key] = grads
    return _cache[key]


def _judge(names: tuple[str, ...], variables=None):
    """compare_cases' comparison: the result is the tuple `names` of float64 arrays of the reference's shapes, free of
    NaN, equal to central differences of variables(case) -> (loss, {name: array}) where given, and to the reference."""
    def compare(got, expected, case):
        if len(names) == 1:
            got, expected = [got], [expected]
        elif not (isinstance(got, list) and len(got) == len(names)):
            raise CheckFailure(f"return the tuple ({', '.join(names)}) of {len(names)} arrays")
        for name, g, e in zip(names, got, expected, strict=True):
            if not isinstance(g, np.ndarray):
                raise CheckFailure(f"{name}: expected a float64 array of shape {e.shape}, got {type(g).__name__}")
            if g.shape != e.shape:
                raise CheckFailure(f"{name}: expected shape {e.shape} (its input's), got {g.shape}")
            assert_format(g, "float64", where=name)
            if not np.isfinite(g).all():
                raise CheckFailure(f"{name} holds {int((~np.isfinite(g)).sum())} NaN or infinite values: something "
                                   "overflowed or divided by zero")
        if variables is not None:
            loss, inputs = variables(case)
            for name, g, n in zip(names, got, _central_differences(loss, inputs), strict=True):
                assert_close(g, n, rtol=NUMERIC[0], atol=NUMERIC[1], where=f"{name} against central differences")
        for name, g, e in zip(names, got, expected, strict=True):
            assert_close(g, e, rtol=REFERENCE[0], atol=REFERENCE[1], where=f"{name} against torch.autograd")
    return compare


def _upstream(rng, shape):
    return rng.standard_normal(shape)  # random, never ones: a constant upstream hides the row terms


# ---------------------------------------------------------------------------------------------------------------
# Softmax and cross-entropy


def _softmax_case(x, rng):
    return {"x": np.asarray(x, dtype=np.float64), "dy": _upstream(rng, np.shape(x))}


def _softmax_loss(case):
    def loss(x, dy=case["dy"]):
        return float((dy * bw.softmax(x)).sum())
    return loss, {"x": case["x"]}


SOFTMAX = _judge(("dx",), _softmax_loss)


@check(points=2)
def softmax_gradients(student, rng, hidden):
    """softmax_backward(x, dy) = s * (dy - sum(dy * s)) over the last axis, with a random dy."""
    cases = [_softmax_case([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0]], rng),
             _softmax_case(rng.standard_normal((2, 2, 5)), rng)]
    if hidden:
        cases = [_softmax_case(rng.standard_normal((1, 1)), rng),  # one element: s = 1, dx = 0
                 _softmax_case(3 * rng.standard_normal((4, 6)), rng),
                 _softmax_case(np.array([[8.0, 0.0, -1.0, 0.5]]), rng),  # one dominant entry
                 _softmax_case(rng.standard_normal((2, 3, 4)), rng)]
    compare_cases(student, "softmax_backward", cases, bw.softmax_backward, returns="array", hidden=hidden,
                  compare=SOFTMAX)


def _ce_case(logits, targets, rng, ignore_index=-100):
    return {"logits": np.asarray(logits, dtype=np.float64), "targets": np.asarray(targets, dtype=np.int64),
            "dloss": float(rng.uniform(0.5, 2.0) * rng.choice([-1, 1])), "ignore_index": ignore_index}


def _ce_loss(case):
    if (case["targets"] == case["ignore_index"]).all():
        return None  # the loss is nan: only the reference (all zeros) judges
    def loss(logits, targets=case["targets"], dloss=case["dloss"], ignore_index=case["ignore_index"]):
        return dloss * bw.cross_entropy(logits, targets, ignore_index)
    return loss, {"logits": case["logits"]}


def _ce_judge(got, expected, case):
    _judge(("dlogits",), _ce_loss if _ce_loss(case) is not None else None)(got, expected, case)


@check(points=2)
def cross_entropy_gradients(student, rng, hidden):
    """cross_entropy_backward(logits, targets, dloss) = dloss * (softmax - onehot) / N with no row ignored."""
    cases = [_ce_case(rng.standard_normal((4, 5)), [0, 3, 4, 1], rng),
             _ce_case(2 * rng.standard_normal((3, 3)), [2, 2, 0], rng)]
    if hidden:
        cases = [_ce_case(rng.standard_normal((1, 6)), [5], rng),  # one row
                 _ce_case(rng.standard_normal((3, 1)), [0, 0, 0], rng),  # one class: the loss is 0 whatever x
                 _ce_case(3 * rng.standard_normal((6, 7)), rng.integers(0, 7, 6), rng)]
    compare_cases(student, "cross_entropy_backward", cases, bw.cross_entropy_backward, returns="array",
                  hidden=hidden, compare=_ce_judge)


@check(points=2)
def ignored_rows(student, rng, hidden):
    """Ignored rows get zero gradient; the mean divides by the kept rows only; every row ignored gives zeros."""
    cases = [_ce_case(rng.standard_normal((5, 4)), [1, -100, 3, -100, 0], rng),
             _ce_case(rng.standard_normal((3, 4)), [-100, -100, -100], rng)]  # every row ignored: zeros
    if hidden:
        cases = [_ce_case(rng.standard_normal((6, 5)), [2, 0, 2, 4, 2, 1], rng, ignore_index=2),  # a class ignored
                 _ce_case(rng.standard_normal((4, 3)), [-100, -100, 1, -100], rng),  # one row kept
                 _ce_case(rng.standard_normal((2, 3)), [-1, -1], rng, ignore_index=-1)]
    compare_cases(student, "cross_entropy_backward", cases, bw.cross_entropy_backward, returns="array",
                  hidden=hidden, compare=_ce_judge)


@check(points=2)
def large_logits(student, rng, hidden):
    """softmax_backward and cross_entropy_backward on inputs around 1e3: no overflow, no 0 * inf."""
    shifted = 1000 + rng.standard_normal((3, 5))  # exp(1000) overflows float64
    spread = 1000 * rng.standard_normal((4, 5))  # every probability but the largest underflows to 0
    targets = spread.argmin(axis=1)  # the least likely class: its probability is 0.0 in float64
    softmax_cases = [_softmax_case(shifted, rng)]
    ce_cases = [_ce_case(shifted, [0, 4, 2], rng), _ce_case(spread, targets, rng)]
    if hidden:
        softmax_cases = [_softmax_case(-1000 + rng.standard_normal((2, 6)), rng),
                         _softmax_case(1000 * rng.standard_normal((3, 4)), rng)]
        spread = 1000 * rng.standard_normal((5, 4))
        ce_cases = [_ce_case(spread, spread.argmin(axis=1), rng),
                    _ce_case(-1000 + rng.standard_normal((2, 3)), [1, 2], rng)]
    compare_cases(student, "softmax_backward", softmax_cases, bw.softmax_backward, returns="array", hidden=hidden,
                  compare=SOFTMAX)
    compare_cases(student, "cross_entropy_backward", ce_cases, bw.cross_entropy_backward, returns="array",
                  hidden=hidden, compare=_ce_judge)


# ---------------------------------------------------------------------------------------------------------------
# LayerNorm and attention


def _ln_case(x, rng, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    return {"x": x, "gamma": 1 + 0.5 * rng.standard_normal(x.shape[1]), "dy": _upstream(rng, x.shape), "eps": eps}


def _ln_loss(case):
    def loss(x, gamma, beta, dy=case["dy"], eps=case["eps"]):
        return float((dy * bw.layer_norm(x, gamma, beta, eps)).sum())
    return loss, {"x": case["x"], "gamma": case["gamma"], "beta": np.zeros_like(case["gamma"])}


@check(points=2)
def layer_norm_gradients(student, rng, hidden):
    """layer_norm_backward(x, gamma, dy, eps) = (dx with the mean and variance terms, dgamma, dbeta)."""
    cases = [_ln_case([[1.0, 2.0, 4.0, -1.0], [0.0, -1.0, 3.0, 0.5]], rng), _ln_case(rng.uniform(-2, 2, (3, 5)), rng)]
    if hidden:
        cases = [_ln_case(rng.uniform(-3, 3, (1, 6)), rng),  # one row
                 _ln_case(rng.uniform(-3, 3, (3, 1)), rng),  # one element per row: dx = 0
                 _ln_case(np.repeat(rng.uniform(-3, 3, (2, 1)), 4, axis=1), rng),  # constant rows: xhat = 0
                 _ln_case(rng.standard_normal((3, 5)), rng, eps=1.0)]
    compare_cases(student, "layer_norm_backward", cases, bw.layer_norm_backward, returns="list", hidden=hidden,
                  compare=_judge(("dx", "dgamma", "dbeta"), _ln_loss))


def _attention_case(T, S, d, dv, rng, causal):
    q, k, v = rng.standard_normal((T, d)), rng.standard_normal((S, d)), rng.standard_normal((S, dv))
    return {"q": q, "k": k, "v": v, "dy": _upstream(rng, (T, dv)), "causal": causal}


def _attention_loss(case):
    def loss(q, k, v, dy=case["dy"], causal=case["causal"]):
        return float((dy * bw.attention(q, k, v, causal)).sum())
    return loss, {"q": case["q"], "k": case["k"], "v": case["v"]}


ATTENTION = _judge(("dq", "dk", "dv"), _attention_loss)


@check(points=2)
def attention_gradients(student, rng, hidden):
    """attention_backward(q, k, v, dy) = (dq, dk, dv) through both matmuls and the softmax's full Jacobian."""
    cases = [_attention_case(4, 5, 3, 2, rng, False), _attention_case(3, 3, 2, 3, rng, False)]
    if hidden:
        cases = [_attention_case(1, 1, 2, 2, rng, False),  # one key: P = 1, dq = dk = 0
                 _attention_case(1, 6, 3, 2, rng, False),  # one query (a decode step)
                 _attention_case(5, 3, 4, 3, rng, False)]
    compare_cases(student, "attention_backward", cases, bw.attention_backward, returns="list", hidden=hidden,
                  compare=ATTENTION)


@check(points=2)
def causal_attention(student, rng, hidden):
    """attention_backward(..., causal=True): no gradient crosses the mask (query i sees keys j <= i)."""
    cases = [_attention_case(4, 4, 3, 2, rng, True)]
    if hidden:
        cases = [_attention_case(3, 5, 2, 3, rng, True),  # T < S: the mask is aligned to the top left
                 _attention_case(5, 3, 3, 2, rng, True),  # T > S: the last queries see every key
                 _attention_case(1, 4, 2, 2, rng, True)]  # one query sees key 0 only
    compare_cases(student, "attention_backward", cases, bw.attention_backward, returns="list", hidden=hidden,
                  compare=ATTENTION)


# ---------------------------------------------------------------------------------------------------------------
# Convolution and pooling


def _conv_case(x_shape, w_shape, rng, stride=1, padding=0):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    out = bw.conv2d(x, w, None, stride, padding)
    return {"x": x, "w": w, "dy": _upstream(rng, out.shape), "stride": stride, "padding": padding}


def _conv_loss(case):
    def loss(x, w, b, dy=case["dy"], stride=case["stride"], padding=case["padding"]):
        return float((dy * bw.conv2d(x, w, b, stride, padding)).sum())
    return loss, {"x": case["x"], "w": case["w"], "b": np.zeros(case["w"].shape[0])}


@check(points=3)
def conv_gradients(student, rng, hidden):
    """conv2d_backward(x, w, dy, stride, padding) = (dx, dw, db) of torch's cross-correlation."""
    cases = [_conv_case((1, 2, 4, 4), (2, 2, 2, 2), rng), _conv_case((2, 1, 5, 4), (3, 1, 3, 3), rng, 2, 1)]
    if hidden:
        cases = [_conv_case((2, 3, 3, 3), (2, 3, 1, 1), rng),  # 1 x 1: a matmul over channels
                 _conv_case((1, 2, 4, 3), (2, 2, 4, 3), rng),  # the kernel covers the image: one output
                 _conv_case((1, 1, 5, 6), (2, 1, 3, 2), rng, 3, 2),  # stride 3, padding 2, a 3 x 2 kernel
                 _conv_case((1, 2, 4, 4), (1, 2, 2, 3), rng, 1, 1)]
    compare_cases(student, "conv2d_backward", cases, bw.conv2d_backward, returns="list", hidden=hidden,
                  compare=_judge(("dx", "dw", "db"), _conv_loss))


def _distinct(shape, rng):
    """Values 0.1 apart in random order: every window has one clear maximum, far beyond h."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.1 + 0.01 * rng.uniform(size=shape)


def _pool_case(x, kernel_size, stride, rng):
    B, C, H, W = x.shape
    out = (B, C, (H - kernel_size) // stride + 1, (W - kernel_size) // stride + 1)
    return {"x": np.asarray(x, dtype=np.float64), "dy": _upstream(rng, out), "kernel_size": kernel_size,
            "stride": stride}


def _pool_loss(forward):
    def variables(case):
        def loss(x, dy=case["dy"], kernel_size=case["kernel_size"], stride=case["stride"]):
            return float((dy * forward(x, kernel_size, stride)).sum())
        loss.__qualname__ = forward.__name__  # the cache tells the two pools apart by name
        return loss, {"x": case["x"]}
    return variables


def _pool_cases(rng, hidden):
    peak = _distinct((1, 1, 5, 5), rng)
    peak[0, 0, 2, 2] = peak.max() + 1  # the centre is the maximum of all nine overlapping windows: its dy is summed
    cases = [_pool_case(_distinct((1, 2, 4, 4), rng), 2, 2, rng), _pool_case(peak, 3, 1, rng)]
    if hidden:
        cases = [_pool_case(_distinct((2, 1, 3, 3), rng), 1, 1, rng),  # 1 x 1: the identity
                 _pool_case(_distinct((1, 2, 5, 5), rng), 3, 2, rng),  # overlapping by one
                 _pool_case(_distinct((1, 1, 4, 4), rng), 4, 4, rng),  # the whole image
                 _pool_case(_distinct((1, 1, 5, 4), rng), 2, 3, rng)]  # stride > kernel: pixels no window reads
    return cases


@check(points=2)
def max_pool_gradients(student, rng, hidden):
    """max_pool2d_backward(x, dy, kernel_size, stride) sends dy to each window's maximum, summed over windows."""
    compare_cases(student, "max_pool2d_backward", _pool_cases(rng, hidden), bw.max_pool2d_backward, returns="array",
                  hidden=hidden, compare=_judge(("dx",), _pool_loss(bw.max_pool2d)))


@check(points=1)
def max_pool_ties(student, rng, hidden):
    """On a tie, max_pool2d_backward sends dy to the first maximum in row-major order only (torch's rule)."""
    tied = np.ones((1, 1, 4, 4))
    tied[0, 0, 2:, 2:] = [[0.0, 1.0], [1.0, 1.0]]  # the last window's maximum 1.0 is its 2nd, 3rd and 4th pixel
    cases = [_pool_case(tied, 2, 2, rng)]
    if hidden:
        cases = [_pool_case(rng.integers(0, 2, (2, 2, 4, 6)).astype(float), 2, 2, rng),
                 _pool_case(np.zeros((1, 1, 3, 3)), 3, 3, rng)]
    # No central differences: the maximum has no derivative at a tie (they would split dy between the tied pixels).
    compare_cases(student, "max_pool2d_backward", cases, bw.max_pool2d_backward, returns="array", hidden=hidden,
                  compare=_judge(("dx",)))


@check(points=2)
def avg_pool_gradients(student, rng, hidden):
    """avg_pool2d_backward(x, dy, kernel_size, stride) shares each window's dy equally, summed over windows."""
    compare_cases(student, "avg_pool2d_backward", _pool_cases(rng, hidden), bw.avg_pool2d_backward, returns="array",
                  hidden=hidden, compare=_judge(("dx",), _pool_loss(bw.avg_pool2d)))


# ---------------------------------------------------------------------------------------------------------------
# BatchNorm


def _bn_case(shape, rng, training, eps=1e-5):
    C = shape[1]
    running = (None, None) if training else (rng.standard_normal(C), rng.uniform(0.5, 2.0, C))
    return {"x": 1 + 2 * rng.standard_normal(shape), "running_mean": running[0], "running_var": running[1],
            "gamma": 1 + 0.5 * rng.standard_normal(C), "dy": _upstream(rng, shape), "training": training, "eps": eps}


def _bn_loss(case):
    def loss(x, gamma, beta, dy=case["dy"], mean=case["running_mean"], var=case["running_var"],
             training=case["training"], eps=case["eps"]):
        return float((dy * bw.batch_norm(x, mean, var, gamma, beta, training, eps)).sum())
    return loss, {"x": case["x"], "gamma": case["gamma"], "beta": np.zeros_like(case["gamma"])}


BATCH_NORM = _judge(("dx", "dgamma", "dbeta"), _bn_loss)


@check(points=2)
def batch_norm_training(student, rng, hidden):
    """batch_norm_backward(..., training=True): dx through the batch's mean and variance, which couple the samples."""
    cases = [_bn_case((4, 3), rng, True), _bn_case((2, 2, 2, 3), rng, True)]
    if hidden:
        cases = [_bn_case((2, 3), rng, True),  # two samples: the smallest batch torch normalises
                 _bn_case((6, 1), rng, True, eps=0.5),
                 _bn_case((3, 2, 1, 2), rng, True)]
    compare_cases(student, "batch_norm_backward", cases, bw.batch_norm_backward, returns="list", hidden=hidden,
                  compare=BATCH_NORM)


@check(points=1)
def batch_norm_inference(student, rng, hidden):
    """batch_norm_backward(..., training=False): the running statistics are constants, dx = dy * gamma * rstd."""
    cases = [_bn_case((4, 3), rng, False), _bn_case((2, 2, 2, 3), rng, False)]
    if hidden:
        cases = [_bn_case((1, 3), rng, False),  # one sample: fine in inference
                 _bn_case((3, 2, 2, 1), rng, False, eps=0.5)]
    compare_cases(student, "batch_norm_backward", cases, bw.batch_norm_backward, returns="list", hidden=hidden,
                  compare=BATCH_NORM)
