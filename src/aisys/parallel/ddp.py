"""Data-parallel training with gradient buckets that are all-reduced while the backward pass still runs.

    state = ddp_attach(params, cap_bytes=25 * 2**20)   # once: buckets, and a hook on every trainable parameter
    for batch in shard:
        loss(params, batch).backward()                   # the hooks launch each bucket's all-reduce as it fills
        ddp_finish(state)                                # wait, average, copy back into .grad
        sgd_step(params)

What torch.nn.parallel.DistributedDataParallel does (Li et al., "PyTorch Distributed: Experiences on
Accelerating Data Parallel Training", VLDB 2020, section 3.2; torch/csrc/distributed/c10d/reducer.cpp),
as functions over a list of tensors and a state dict instead of a class:

- `assign_buckets` groups the parameters into buckets of about `cap_bytes`, walking them in
  REVERSE registration order, because backward produces gradients roughly in that order: the
  first bucket fills first.
- `ddp_attach` registers a post-accumulate-grad hook on each distinct trainable parameter. When
  the last gradient of a bucket arrives, the bucket's gradients are flattened into one buffer and
  its all-reduce is posted asynchronously, while backward goes on computing earlier layers.
  Buckets are launched in bucket order (a bucket that completes early waits for its
  predecessors), so that every rank posts the same all-reduces in the same order.
- `ddp_finish` posts the buckets that never completed (a parameter not used in this step's
  forward gets no gradient: it contributes zeros), waits for every all-reduce, divides by the
  world size (gloo has no average) and copies the result back into each `.grad`.

A tensor listed twice (weights tied between an embedding and an output projection) is one
parameter, placed where it is first listed, and reduced once; a parameter with
requires_grad=False is in no bucket and never reduced.

Differences from torch, on purpose: one size cap for every bucket (torch caps the first bucket
at 1 MiB, dist._DEFAULT_FIRST_BUCKET_BYTES, to start communicating sooner), and no grouping by
dtype and device (torch's buckets hold one dtype on one device; here every parameter has the same
dtype and device, so the grouping changes nothing). Otherwise the rule is torch's: add
parameters to the open bucket, close it as soon as its bytes reach the cap.
"""

import time

import torch
import torch.distributed as dist

from .._validate import nonnegative_int, positive_int


def assign_buckets(sizes: list[int], cap_bytes: int) -> list[list[int]]:
    """Buckets of parameter indices, in the order their all-reduces are posted.

    sizes[i] is parameter i's gradient in bytes, i in registration order. Walk the indices from the
    last to the first, adding each to the open bucket; close the bucket once its bytes reach
    `cap_bytes` (>=); the last bucket may be smaller. A parameter larger than the cap closes the
    bucket it joins; a cap below every size gives one parameter per bucket; no sizes, no buckets.
    """
    sizes = [nonnegative_int(f"sizes[{i}]", size) for i, size in enumerate(sizes)]
    cap_bytes = positive_int("cap_bytes", cap_bytes)
    buckets, bucket, filled = [], [], 0
    for index in reversed(range(len(sizes))):
        bucket.append(index)
        filled += sizes[index]
        if filled >= cap_bytes:
            buckets.append(bucket)
            bucket, filled = [], 0
    if bucket:
        buckets.append(bucket)
    return buckets


def trainable(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The distinct parameters that require a gradient, in the order first listed (a tied tensor once)."""
    distinct = []
    for param in params:
        if param.requires_grad and not any(param is seen for seen in distinct):
            distinct.append(param)
    return distinct


def ddp_attach(params: list[torch.Tensor], cap_bytes: int, log: list | None = None) -> dict:
    """Bucket the trainable parameters and hook each one; the state the hooks and `ddp_finish` share.

    state["params"]: the distinct trainable parameters, in registration order; state["buckets"]:
    lists of indices into it, from `assign_buckets`; state["bucket_of"][i]: parameter i's bucket;
    state["arrived"][b]: gradients of bucket b accumulated this step; state["next"]: the next
    bucket to launch; state["launched"]: (bucket, all-reduce request, flat buffer) in launch order.
    With a list `log`, each all-reduce appends ("posted", bucket, bytes, time.perf_counter()) when posted and
    ("done", bucket, bytes, time) when it completes (from the request's future: gloo's thread; see
    aisys.parallel.ddp_timeline).
    """
    if not isinstance(params, (list, tuple)) or not all(isinstance(p, torch.Tensor) for p in params):
        raise ValueError("params must be a list of tensors")
    cap_bytes = positive_int("cap_bytes", cap_bytes)
    mine = trainable(params)
    buckets = assign_buckets([p.numel() * p.element_size() for p in mine], cap_bytes)
    bucket_of = [0] * len(mine)
    for b, bucket in enumerate(buckets):
        for index in bucket:
            bucket_of[index] = b
    state = {"params": mine, "buckets": buckets, "bucket_of": bucket_of, "arrived": [0] * len(buckets),
             "next": 0, "launched": [], "log": log}
    for index, param in enumerate(mine):
        param.register_post_accumulate_grad_hook(_hook(state, index))
    return state


def _hook(state: dict, index: int):
    """The hook of parameter `index`: count its gradient in, launch whatever buckets are now complete, in order."""

    def gradient_accumulated(param):
        state["arrived"][state["bucket_of"][index]] += 1
        launch_ready(state)

    return gradient_accumulated


def launch_ready(state: dict, everything: bool = False) -> None:
    """Post the all-reduce of each complete bucket from state["next"] on, stopping at the first incomplete one
    (or, with `everything`, of every bucket left: a gradient missing in it counts as zeros)."""
    buckets = state["buckets"]
    while state["next"] < len(buckets):
        b = state["next"]
        if not everything and state["arrived"][b] < len(buckets[b]):
            return
        grads = [state["params"][i].grad for i in buckets[b]]
        flat = torch.cat([g.flatten() if g is not None else torch.zeros_like(p).flatten()
                          for g, p in zip(grads, (state["params"][i] for i in buckets[b]))])
        work = dist.all_reduce(flat, async_op=True)
        state["launched"].append((b, work, flat))
        state["next"] += 1
        if state["log"] is not None:
            _log_times(state["log"], b, flat.numel() * flat.element_size(), work)


def _log_times(log: list, bucket: int, nbytes: int, work) -> None:
    log.append(("posted", bucket, nbytes, time.perf_counter()))
    work.get_future().then(lambda _: log.append(("done", bucket, nbytes, time.perf_counter())))


def ddp_finish(state: dict) -> None:
    """Launch the buckets left, wait for every all-reduce, and write the average over ranks into each .grad.
    Leaves the state ready for the next step."""
    launch_ready(state, everything=True)
    world = dist.get_world_size()
    for b, work, flat in state["launched"]:
        work.wait()
        flat.div_(world)
        offset = 0
        for i in state["buckets"][b]:
            param = state["params"][i]
            average = flat[offset:offset + param.numel()].view_as(param)
            if param.grad is None:
                param.grad = average.clone()
            else:
                param.grad.copy_(average)
            offset += param.numel()
    state["arrived"] = [0] * len(state["buckets"])
    state["next"] = 0
    state["launched"] = []
