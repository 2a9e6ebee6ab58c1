"""Activation checkpointing on a chain of layers: a simulator of a plan's memory and recomputation, the optimal plan
under a memory budget, Chen's sqrt(n) rule, brute force, and a measurement of torch.utils.checkpoint.

(Not to be confused with aisys.parallel.checkpointing, which writes a training run's state to disk against failures.)

The model. A chain of n layers runs x_0 -> layer 0 -> x_1 -> ... -> layer n-1 -> x_n. Layer i saves a[i] bytes for
its backward pass (its input x_i, as a Linear layer does) and costs c[i] to run forward once. A **plan** is the set
of **checkpoint** layers: sorted layer indices, always holding layer 0 (the chain's input x_0 is always kept: it is
what the first segment is recomputed from). The checkpoints cut the chain into **segments**: segment j..k runs from
a checkpoint j up to the layer before the next checkpoint (or the last layer).

- Forward: a one-layer segment runs normally and saves a[j]. A longer segment runs as
  torch.utils.checkpoint.checkpoint does: it saves only its input x_j (a[j] bytes, the same tensor layer j would
  save), runs its layers without saving anything, and drops their outputs as it goes. After the forward pass the
  saved bytes are `held` = the sum of a over the checkpoints.
- Backward, last segment first: a longer segment reruns all its layers j..k from its saved input (recomputation
  c[j] + ... + c[k]: checkpoint reruns the whole function, the last layer too), which saves a[j] .. a[k] again (a[j]
  is the same tensor as the checkpoint's), all of them alive at once when its backward starts; the backward then
  frees them, and the segment's input too. A one-layer segment recomputes nothing.
- Memory counts saved activations only: not the parameters, not the gradients, not the values a forward pass
  holds for a moment. While segment j..k runs backward the checkpoints before j are still held, so the peak is
  the largest, over segments, of (a over the checkpoints before j) + a[j] + ... + a[k]. The end of the forward pass,
  the sum over the checkpoints, never exceeds that of the last segment.

Sources: Chen, Xu, Zhang and Guestrin, "Training Deep Nets with Sublinear Memory Cost" (arXiv:1604.06174, 2016),
section 4 (sqrt(n) segments, and a search over budgets); Jain et al., "Checkmate: Breaking the Memory Wall with
Optimal Tensor Rematerialization" (MLSys 2020), which solves the general graph optimally with an integer program;
for a chain the dynamic programme over segments below is exact.
"""

import math
from functools import lru_cache

import numpy as np

from .._validate import nonnegative_int, positive_int


def _sizes(a) -> tuple[int, ...]:
    """a as a tuple of ints >= 0, at least one."""
    if not isinstance(a, (list, tuple)) or not a:
        raise ValueError(f"a must be a non-empty list of integers >= 0 (bytes saved per layer), got {a!r}")
    return tuple(nonnegative_int("a[i]", x) for x in a)


def _chain(a, c) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """a and c as tuples of ints >= 0 of one length >= 1."""
    a = _sizes(a)
    if not isinstance(c, (list, tuple)) or len(c) != len(a):
        raise ValueError(f"c must be a list of integers >= 0 of the same length as a ({len(a)}), got {c!r}")
    return a, tuple(nonnegative_int("c[i]", x) for x in c)


def _plan(plan, n: int) -> list[int]:
    """The sorted checkpoints of a plan over n layers, layer 0 included whether listed or not."""
    if not isinstance(plan, (list, tuple)) or any(
            isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < n for j in plan):
        raise ValueError(f"plan must be a list of layer indices in [0, {n}), got {plan!r}")
    if len(set(int(j) for j in plan)) != len(plan):
        raise ValueError(f"plan must not repeat a layer, got {plan!r}")
    return sorted({0} | {int(j) for j in plan})


def segments(n: int, plan) -> list[tuple[int, int]]:
    """The segments (first layer, last layer) that a plan's checkpoints cut n layers into, in order."""
    n = positive_int("n", n)
    starts = _plan(plan, n)
    return [(j, k - 1) for j, k in zip(starts, starts[1:] + [n])]


def simulate(a, c, plan) -> dict:
    """Run a plan layer by layer: {"peak": the most bytes saved at once, "recompute": the forward cost rerun,
    "held": the bytes saved at the end of the forward pass, "steps": [(event, bytes saved after it)], an event being
    "forward i", "recompute i" or "backward i"}."""
    a, c = _chain(a, c)
    steps, live, recompute = [], 0, 0
    parts = segments(len(a), plan)
    for j, k in parts:  # forward: each segment keeps its input's a[j], whatever its length
        for i in range(j, k + 1):
            live += a[i] if i == j else 0
            steps.append((f"forward {i}", live))
    held = peak = live
    for j, k in reversed(parts):
        if k > j:  # checkpoint reruns the segment; its layers save again, a[j] being the same tensor as before
            for i in range(j, k + 1):
                recompute += c[i]
                live += a[i] if i > j else 0
                steps.append((f"recompute {i}", live))
        peak = max(peak, live)
        for i in range(k, j - 1, -1):  # the backward through the segment frees what each layer saved
            live -= a[i]
            steps.append((f"backward {i}", live))
    return {"peak": peak, "recompute": recompute, "held": held, "steps": steps}


def least_budget(a) -> int:
    """The least peak any plan reaches (the smallest feasible budget), by a dynamic programme over segments:
    best(j) = min over k of max(a[j] + ... + a[k], a[j] + best(k + 1)), best(n) = 0."""
    a = _sizes(a)
    n = len(a)
    best = [0] * (n + 1)
    for j in range(n - 1, -1, -1):
        best[j] = min(max(sum(a[j:k + 1]), a[j] + best[k + 1]) for k in range(j, n))
    return best[0]


def plan_checkpoints(a, c, budget) -> list[int]:
    """A plan of least recomputation whose peak is at most `budget` (ValueError, naming the least feasible
    budget, when none fits). Exact: a dynamic programme over (first layer of a segment, bytes left for it)."""
    a, c = _chain(a, c)
    budget = nonnegative_int("budget", budget)
    least = least_budget(list(a))
    if budget < least:
        raise ValueError(f"budget {budget} is below the least feasible budget {least} (the smallest peak of any plan)")
    n = len(a)
    prefix_a = [0, *np.cumsum(a).tolist()]
    prefix_c = [0, *np.cumsum(c).tolist()]

    @lru_cache(maxsize=None)
    def best(j: int, room: int) -> tuple[float, tuple[int, ...]]:
        """(least recomputation, checkpoints) for layers j.. when `room` bytes are left above earlier checkpoints."""
        if j == n:
            return 0, ()
        found = (math.inf, ())
        for k in range(j, n):
            if prefix_a[k + 1] - prefix_a[j] > room:  # segment j..k alone does not fit; longer ones neither
                break
            cost = 0 if k == j else prefix_c[k + 1] - prefix_c[j]
            rest, plan = best(k + 1, room - a[j])
            if cost + rest < found[0]:
                found = (cost + rest, (j, *plan))
        return found

    return list(best(0, budget)[1])


def sqrt_plan(n: int) -> list[int]:
    """Chen et al.'s rule: a checkpoint every s = ceil(sqrt(n)) layers (0, s, 2s, ...), sizes ignored."""
    n = positive_int("n", n)
    s = math.isqrt(n - 1) + 1
    return list(range(0, n, s))


def all_plans(a, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every plan (layer 0 always a checkpoint) at once, vectorised: (masks (2^(n-1), n) bool, peaks, recomputes)."""
    a, c = _chain(a, c)
    n = len(a)
    if n > 22:
        raise ValueError(f"a must have at most 22 layers for brute force (2^(n-1) plans), got {n}")
    codes = np.arange(2 ** (n - 1), dtype=np.int64)
    masks = np.ones((codes.size, n), dtype=bool)
    masks[:, 1:] = (codes[:, None] >> np.arange(n - 1)) & 1 == 1
    a_, c_ = np.asarray(a, dtype=np.int64), np.asarray(c, dtype=np.int64)
    index = np.arange(n)
    start = np.maximum.accumulate(np.where(masks, index, 0), axis=1)  # each layer's segment's first layer
    ends = np.ones_like(masks)
    ends[:, :-1] = masks[:, 1:]  # layer i ends its segment when i + 1 is a checkpoint, or i is the last
    held_upto = np.cumsum(masks * a_, axis=1)  # a over the checkpoints up to layer i
    total_upto = np.cumsum(a_)  # a over all layers up to layer i
    before = np.concatenate([[0], total_upto])[start]  # a over all layers before the segment's start
    # at a segment's end i: checkpoints before its start (held_upto[i] - a[start]) + a[start..i]
    value = held_upto - a_[start] + total_upto - before
    peaks = np.where(ends, value, 0).max(axis=1)
    alone = masks & ends  # one-layer segments recompute nothing
    recomputes = ((~alone) * c_).sum(axis=1)
    return masks, peaks, recomputes


def brute_force(a, c, budget) -> tuple[int, list[int]]:
    """(least recomputation, a plan reaching it) among all 2^(n-1) plans with peak <= budget; ValueError if none."""
    masks, peaks, recomputes = all_plans(a, c)
    budget = nonnegative_int("budget", budget)
    fits = peaks <= budget
    if not fits.any():
        raise ValueError(f"budget {budget} is below the least feasible budget {int(peaks.min())}")
    best = int(np.argmin(np.where(fits, recomputes, np.iinfo(np.int64).max)))
    return int(recomputes[best]), np.flatnonzero(masks[best]).tolist()


def frontier(a, c) -> list[tuple[int, int]]:
    """The (peak, least recomputation) pairs no plan improves on both, by brute force, from the least peak up."""
    _, peaks, recomputes = all_plans(a, c)
    order = np.lexsort((recomputes, peaks))
    points, least = [], math.inf
    for i in order:
        if recomputes[i] < least:
            least = int(recomputes[i])
            points.append((int(peaks[i]), least))
    return points


# ----------------------------------------------------------------------------------------- measured in torch


def torch_chain(widths, seed: int = 0) -> list:
    """n = len(widths) - 1 float64 Linear layers, layer i from widths[i] to widths[i + 1] features."""
    import torch

    if not isinstance(widths, (list, tuple)) or len(widths) < 2:
        raise ValueError(f"widths must be a list of at least 2 feature counts, got {widths!r}")
    widths = [positive_int("widths[i]", w) for w in widths]
    generator = torch.Generator().manual_seed(seed)
    layers = []
    for w_in, w_out in zip(widths, widths[1:]):
        layer = torch.nn.Linear(w_in, w_out, dtype=torch.float64)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(w_out, w_in, generator=generator, dtype=torch.float64) / w_in ** 0.5)
        layers.append(layer)
    return layers


def chain_costs(widths, batch: int) -> list[int]:
    """Each Linear layer's forward FLOPs for `batch` rows: 2 batch w_in w_out."""
    batch = positive_int("batch", batch)
    return [2 * batch * w_in * w_out for w_in, w_out in zip(widths, widths[1:])]


class _Meter:
    """Bytes of saved tensors alive, counted once per storage; parameters are not activations and are left out."""

    def __init__(self, parameters: set):
        self.parameters, self.count, self.size = parameters, {}, {}
        self.live = self.peak = 0

    def pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() in self.parameters:
            return tensor
        return (_Held(self, storage.data_ptr(), storage.nbytes()), tensor)

    @staticmethod
    def unpack(packed):
        return packed[1] if isinstance(packed, tuple) else packed


class _Held:
    """One saved tensor's claim on its storage: the storage counts while any claim on it lives (CPython frees a
    claim as soon as autograd drops the saved tensor)."""

    def __init__(self, meter: _Meter, key: int, size: int):
        self.meter, self.key = meter, key
        if not meter.count.get(key):
            meter.live += size
            meter.size[key] = size
        meter.count[key] = meter.count.get(key, 0) + 1
        meter.peak = max(meter.peak, meter.live)

    def __del__(self):
        meter = self.meter
        meter.count[self.key] -= 1
        if not meter.count[self.key]:
            meter.live -= meter.size.pop(self.key)


def measure(widths, plan=None, batch: int = 4, seed: int = 0) -> dict:
    """Train one step of the chain of torch_chain(widths, seed) on `batch` rows, its segments run with
    torch.utils.checkpoint.checkpoint(use_reentrant=True) (whose recomputation saves through the hooks: the
    non-reentrant variant stores it aside), under torch.autograd.graph.saved_tensors_hooks that count the bytes of
    saved tensors alive. Without a plan every layer runs normally and `a` lists what each saves.

    Returns {"a": bytes saved per layer (plan None only), "held": bytes saved after the forward pass, "peak": the
    most at once, "recompute": FLOPs of the forward calls run again (chain_costs), "reruns": their layers}."""
    import torch
    from torch.utils.checkpoint import checkpoint

    layers = torch_chain(widths, seed)
    n = len(layers)
    parts = [(j, j) for j in range(n)] if plan is None else segments(n, plan)
    costs = chain_costs(widths, batch)
    calls = [0] * n
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda module, args, out, i=i: calls.__setitem__(i, calls[i] + 1))
    meter = _Meter({p.untyped_storage().data_ptr() for layer in layers for p in layer.parameters()})
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, widths[0], generator=generator, dtype=torch.float64, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
        h = x
        for j, k in parts:
            def run(z, j=j, k=k):
                for layer in layers[j:k + 1]:
                    z = layer(z)
                return z
            before = meter.live
            h = run(h) if k == j else checkpoint(run, h, use_reentrant=True)
            saved.append(meter.live - before)
        held = meter.live
        h.sum().backward()  # a sum saves no tensor: the loss adds nothing to count
    reruns = [i for i in range(n) for _ in range(calls[i] - 1)]
    result = {"held": held, "peak": meter.peak, "recompute": sum(costs[i] for i in reruns), "reruns": reruns}
    if plan is None:
        result["a"] = saved
    return result
