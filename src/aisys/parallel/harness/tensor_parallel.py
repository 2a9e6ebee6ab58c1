"""The trusted driver of the tensor-parallel exercise: each rank builds the whole layer from a seed, takes its own
shard, runs the student's forward and backward and records the collectives of each pass.

The weights are cut here (by the exercise's stated layout), not by the student's `shard_mlp`, so that a wrong
shard function fails the sharding check alone; the forward runs under `traffic.record(allow_collectives=True)`
with a mark between the passes, and the backward starts from a random upstream gradient, the same on every rank
(the layer's output is replicated). Everything is float64 on the rank's device (GPU `rank` under NCCL).
"""

import torch
import torch.distributed as dist

from aisys.collectives import traffic
from aisys.collectives.launch import error_text, rank_device


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def mlp_inputs(seed: int, shape: tuple, width: int, hidden: int) -> dict:
    """The whole MLP of one case, float64 on the CPU: x of `shape` (..., width), w1 (width, hidden), b1, w2
    (hidden, width), b2, and the upstream gradient gy of x's shape; weights scaled by 1/sqrt(fan-in)."""
    g = _generator(seed)
    shape = tuple(int(s) for s in shape)

    def randn(*size, scale=1.0):
        return torch.randn(*size, generator=g, dtype=torch.float64) * scale

    return {"x": randn(*shape), "w1": randn(width, hidden, scale=width ** -0.5), "b1": randn(hidden, scale=0.5),
            "w2": randn(hidden, width, scale=hidden ** -0.5), "b2": randn(width, scale=0.5), "gy": randn(*shape)}


def attention_inputs(seed: int, batch: int, tokens: int, width: int) -> dict:
    """The whole attention layer of one case, float64 on the CPU: x (B, T, C), wq, wk, wv, wo (C, C), bo (C,), and
    the upstream gradient gy (B, T, C)."""
    g = _generator(seed)

    def randn(*size, scale=1.0):
        return torch.randn(*size, generator=g, dtype=torch.float64) * scale

    weights = {name: randn(width, width, scale=width ** -0.5) for name in ("wq", "wk", "wv", "wo")}
    return {"x": randn(batch, tokens, width), **weights, "bo": randn(width, scale=0.5),
            "gy": randn(batch, tokens, width)}


def columns(size: int, rank: int, world_size: int) -> slice:
    """Rank's contiguous 1/world_size of `size` (the exercise's layout: rank 0 first)."""
    part = size // world_size
    return slice(rank * part, (rank + 1) * part)


def _leaf(tensor: torch.Tensor, device) -> torch.Tensor:
    return tensor.clone().to(device).requires_grad_()


def _collectives(log: traffic.Traffic, start: str, stop: str) -> list[dict]:
    """The collectives recorded between the marks `start` and `stop`, as plain dicts."""
    seqs = {mark.label: mark.seq for mark in log.marks}
    low, high = seqs.get(start, -1), seqs.get(stop, log.posted)
    return [c.to_plain() for c in log.collectives if low < c.seq < high]


def _run(function, inputs: list, upstream: torch.Tensor, leaves: dict) -> dict:
    """Call `function(*inputs)` (forward), then backward with `upstream`; the output, the leaves' gradients and the
    collectives of each pass. An error of either pass is reported, not raised, so that the forward's result is
    still judged when only the backward fails."""
    result = {"y": None, "forward": [], "backward": [], "forward_error": None, "backward_error": None}
    with traffic.record(allow_collectives=True) as log:
        log.mark("forward")
        try:
            y = function(*inputs)
        except NotImplementedError:
            raise
        except Exception as error:
            y, result["forward_error"] = None, error_text(error)
        log.mark("backward")
        if isinstance(y, torch.Tensor):
            result["y"] = y.detach()
            try:
                if not y.requires_grad:
                    raise RuntimeError("the output does not require grad: it is cut off from the inputs' graph "
                                       "(was it detached, or built from .detach()ed values only?)")
                y.backward(upstream)
            except Exception as error:
                result["backward_error"] = error_text(error)
        elif result["forward_error"] is None:
            result["forward_error"] = f"TypeError: it returned a {type(y).__name__}, not a tensor"
        log.mark("end")
    result["forward"] = _collectives(log, "forward", "backward")
    result["backward"] = _collectives(log, "backward", "end")
    result["grads"] = {name: (leaf.grad.detach() if leaf.grad is not None else None)
                       for name, leaf in leaves.items()}
    return result


def mlp(definitions, seed: int, shape: list, width: int, hidden: int) -> dict:
    """Rank's run of the student's `tp_mlp` on its shard of the seed's MLP; see `_run` for what it returns
    (grads: x, w1, b1, w2 (this rank's shards) and b2)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = rank_device(dist.get_backend())
    whole = mlp_inputs(seed, shape, width, hidden)
    mine = columns(hidden, rank, world_size)
    leaves = {"x": _leaf(whole["x"], device), "w1": _leaf(whole["w1"][:, mine], device),
              "b1": _leaf(whole["b1"][mine], device), "w2": _leaf(whole["w2"][mine, :], device),
              "b2": _leaf(whole["b2"], device)}
    return _run(definitions["tp_mlp"], list(leaves.values()), whole["gy"].to(device), leaves)


def attention(definitions, seed: int, batch: int, tokens: int, width: int, n_heads: int, causal: bool) -> dict:
    """Rank's run of the student's `tp_attention` on its heads of the seed's attention layer (grads: x, wq, wk, wv,
    wo (this rank's shards) and bo)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = rank_device(dist.get_backend())
    whole = attention_inputs(seed, batch, tokens, width)
    mine = columns(width, rank, world_size)  # n_heads / world_size whole heads: width / world_size columns
    leaves = {"x": _leaf(whole["x"], device),
              **{name: _leaf(whole[name][:, mine], device) for name in ("wq", "wk", "wv")},
              "wo": _leaf(whole["wo"][mine, :], device), "bo": _leaf(whole["bo"], device)}
    head_size = width // n_heads
    return _run(definitions["tp_attention"], [*leaves.values(), head_size, bool(causal)], whole["gy"].to(device),
                leaves)


def region(definitions, seed: int, name: str, shape: list) -> dict:
    """Rank's run of the student's f or g (`name`) alone, on an input and an upstream gradient that differ on every
    rank (seed + rank), so that a sum over the ranks, a copy of one rank's and this rank's own are told apart."""
    rank = dist.get_rank()
    device = rank_device(dist.get_backend())
    g = _generator(int(seed) * 1009 + rank)
    shape = tuple(int(s) for s in shape)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    upstream = torch.randn(*shape, generator=g, dtype=torch.float64)
    leaves = {"x": _leaf(x, device)}
    return _run(definitions[name], [leaves["x"]], upstream.to(device), leaves)


def region_inputs(seed: int, rank: int, shape: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The x and upstream gradient `region` gives rank `rank` (for the grader's expected sums)."""
    g = _generator(int(seed) * 1009 + rank)
    shape = tuple(int(s) for s in shape)
    return (torch.randn(*shape, generator=g, dtype=torch.float64),
            torch.randn(*shape, generator=g, dtype=torch.float64))


def shard(definitions, name: str, *args) -> dict:
    """The student's shard function `name` called on `args` (whole weights as tensors, then n_heads where it takes
    one, rank, world_size): its shards, or the error it raised as 'Type: message' (judged by the grader, which
    quotes it only where the case is visible)."""
    try:
        shards = definitions[name](*args)
    except NotImplementedError:
        raise
    except Exception as error:
        return {"shards": None, "error": error_text(error)}
    if not isinstance(shards, (tuple, list)) or not all(isinstance(s, torch.Tensor) for s in shards):
        return {"shards": None, "error": f"TypeError: it returned a {type(shards).__name__}, not a tuple of tensors"}
    return {"shards": [s.detach().clone() for s in shards], "error": None}
