# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: DDP with gradient buckets and overlap
#
# **You will learn** how PyTorch's DistributedDataParallel hides the all-reduce of the
# gradients behind the backward pass (Li et al., "PyTorch Distributed: Experiences on
# Accelerating Data Parallel Training", VLDB 2020, section 3.2): gradients are grouped into
# **buckets** in reverse registration order, and each bucket's all-reduce is posted
# asynchronously from a gradient hook the moment its last gradient is ready, while backward
# goes on computing the earlier layers. You will also handle what real models bring: weights
# tied between the embedding and the output projection, frozen layers, and parameters that
# take no part in a step.
#
# **Conventions** (the checks hold you to each):
#
# - `assign_buckets(sizes, cap_bytes)`: `sizes[i]` is parameter `i`'s gradient in bytes, `i`
#   in registration order. Walk the indices from the **last to the first**, adding each to the
#   open bucket, and close the bucket as soon as its bytes reach the cap (`>= cap_bytes`). The
#   last bucket may be smaller. So a parameter larger than the cap closes the bucket it joins
#   (it may share it with smaller ones before it), a cap smaller than every size gives one
#   parameter per bucket, and no sizes give no buckets. Return a list of lists of ints.
#   `cap_bytes` below 1 raises `ValueError` naming `cap_bytes`. This is torch's rule
#   (`compute_bucket_assignment_by_size` in `torch/csrc/distributed/c10d/reducer.cpp`) with two
#   simplifications: one cap for every bucket (torch caps the first bucket at 1 MiB,
#   `dist._DEFAULT_FIRST_BUCKET_BYTES`, to start communicating sooner), and no grouping by
#   dtype and device (torch keeps one dtype on one device per bucket; here every parameter
#   has the same dtype and device, so grouping would change nothing).
# - `ddp_attach(params, cap_bytes)` is called once, before the first step, with the model's
#   parameters in registration order. A tensor may be listed twice (tied weights: it is **one**
#   parameter, at its first listing, and its gradient is reduced once); a tensor with
#   `requires_grad=False` (frozen) is in no bucket and never reduced. Bucket the distinct
#   trainable parameters with `assign_buckets`, register a `register_post_accumulate_grad_hook`
#   on each, and return a dict, the state, which your hooks and `ddp_finish` share (what it
#   holds is yours).
# - In a hook, once every parameter of a bucket has its gradient, flatten the bucket
#   (`torch.cat` of the flattened gradients, in the bucket's order) and post
#   `dist.all_reduce(flat, async_op=True)` **at once**: never wait on it in the hook. Post the
#   buckets in bucket order: a bucket that completes before an earlier one waits for it (every
#   rank must post the same all-reduces in the same order, or they would pair the wrong buffers).
# - `ddp_finish(state)` is called after each backward. It posts the buckets still not posted
#   (a parameter that took no part in this step's forward gets no gradient and no hook call:
#   it contributes zeros), waits for every all-reduce, divides by the world size (gloo has no
#   average: sum, then divide) and copies each parameter's slice back into its `.grad` in
#   place (`copy_`). It leaves the state ready for the next step. Before each step the driver
#   zeroes every trainable parameter's `.grad` in place (as `optimizer.zero_grad(set_to_none=False)`
#   does), so `.grad` is always a tensor: the unused parameter's holds zeros.
#
# **What is graded, and where.** A trusted driver (`aisys.parallel.harness.ddp.train`) runs on
# 2 to 4 real processes (gloo on this CPU; NCCL on two GPUs for the last check). Each rank builds
# the same tiny float64 model (an embedding tied to the output projection, a frozen layer, a
# parameter the forward never uses), trains it on its own shard of each batch for a few SGD
# steps, calling your `ddp_attach` before the first step and `ddp_finish` after each backward,
# and records each all-reduce as it is posted together with its own mark when each gradient is
# accumulated (its hook runs before yours). The checks compare the final weights with training
# on the whole batch in one process, count one all-reduce per bucket per step with that
# bucket's bytes in bucket order, require the first all-reduce of each step to be posted before
# the last gradient is ready (overlap), and delay one rank before its backward to see that the
# others do not wait for it inside backward. The driver, not your notebook, runs your
# functions: the grader takes the source of the cells you ran and runs their definitions again
# in a fresh process of its own, in the ranks' dialect (plain Python, `torch`,
# `torch.distributed`; no `class`, `with`, or names starting with `_`; see the ring all-reduce
# exercise of chapter 6 for the whole list).
#
# When your work is graded, `aisys.parallel.ddp` (the reference) cannot be imported;
# `aisys.collectives.launch`, `aisys.collectives.traffic` and `aisys.parallel.harness.ddp` can.

# %%
import numpy as np
import torch
import torch.distributed as dist
from aisys.collectives.launch import RanksFailed, run_ranks
from aisys.parallel.harness import ddp as harness
from aisys_grader import checker

check = checker("05-parallel-training/ddp", globals())

# %% [markdown]
# ## 1. Buckets
#
# Gradients become ready roughly in reverse registration order: the last layer's first. So the
# buckets are filled from the last parameter backwards, and bucket 0 is the first one ready.
# With sizes `[384, 48, 384, 64, 384, 48]` and a cap of 400 bytes: `[[5, 4], [3, 2], [1, 0]]`.

# %% tags=["solution"]
def assign_buckets(sizes: list[int], cap_bytes: int) -> list[list[int]]:
    """Buckets of parameter indices, from the last parameter to the first, each closed once its bytes reach the
    cap: bucket 0 holds the gradients backward produces first."""
    ### BEGIN SOLUTION
    if cap_bytes < 1:
        raise ValueError(f"cap_bytes must be an integer >= 1, got {cap_bytes!r}")
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
    ### END SOLUTION


# %%
print(assign_buckets([384, 48, 384, 64, 384, 48], 400))

# %% tags=["check"]
check("assign_buckets")
### BEGIN HIDDEN TESTS
check("assign_buckets", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Hooks that post each bucket's all-reduce
#
# `param.register_post_accumulate_grad_hook(hook)` calls `hook(param)` once `param.grad`
# holds this step's whole gradient (for a tensor used twice, once: after both uses are summed).
# A hook is a function; give it what it needs through a closure (a `def` inside a `def`) over
# the state and the parameter's index. Helpers of your own (a function that makes a hook, one that
# posts the buckets now complete) go in the same cell, or in any cell you run before the checks.

# %% tags=["solution"]
def ddp_attach(params: list, cap_bytes: int) -> dict:
    """Bucket the distinct trainable parameters, hook each one, and return the state the hooks and ddp_finish
    share."""
    ### BEGIN SOLUTION
    mine = []
    for param in params:
        if param.requires_grad and not any(param is seen for seen in mine):
            mine.append(param)
    buckets = assign_buckets([p.numel() * p.element_size() for p in mine], cap_bytes)
    bucket_of = [0] * len(mine)
    for b, bucket in enumerate(buckets):
        for index in bucket:
            bucket_of[index] = b
    state = {"params": mine, "buckets": buckets, "bucket_of": bucket_of, "arrived": [0] * len(buckets),
             "next": 0, "launched": []}
    for index, param in enumerate(mine):
        param.register_post_accumulate_grad_hook(make_hook(state, index))
    return state


def make_hook(state, index):
    """The hook of parameter `index`: count its gradient in, then post every bucket now complete, in order."""

    def gradient_accumulated(param):
        state["arrived"][state["bucket_of"][index]] += 1
        launch_ready(state, False)

    return gradient_accumulated


def launch_ready(state, everything):
    """Post the all-reduce of each complete bucket from state["next"] on, up to the first incomplete one (with
    `everything`, of every bucket left: a parameter without this step's gradient holds zeros)."""
    buckets = state["buckets"]
    while state["next"] < len(buckets):
        b = state["next"]
        if not everything and state["arrived"][b] < len(buckets[b]):
            return
        flat = torch.cat([state["params"][i].grad.flatten() for i in buckets[b]])
        state["launched"].append((b, dist.all_reduce(flat, async_op=True), flat))
        state["next"] += 1
    ### END SOLUTION


# %% [markdown]
# ## 3. Finish the step
#
# After backward: post what is left, wait, average, copy back.

# %% tags=["solution"]
def ddp_finish(state: dict) -> None:
    """Post the buckets left, wait for every all-reduce, write the average over ranks into each .grad, and reset
    the state for the next step."""
    ### BEGIN SOLUTION
    launch_ready(state, True)
    world = dist.get_world_size()
    for b, work, flat in state["launched"]:
        work.wait()
        flat.div_(world)
        offset = 0
        for i in state["buckets"][b]:
            param = state["params"][i]
            param.grad.copy_(flat[offset:offset + param.numel()].view_as(param))
            offset += param.numel()
    state["arrived"] = [0] * len(state["buckets"])
    state["next"] = 0
    state["launched"] = []
    ### END SOLUTION


# %% [markdown]
# Two ranks train the driver's model for two steps; the timeline of rank 0's first step shows
# each gradient as it is accumulated and each all-reduce as it is posted (its bytes). The
# all-reduces of the first buckets come before the last gradient: they overlap backward.

# %%
def show_timeline(p=2, steps=2, cap_bytes=400):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 8, (steps, p, 3))
    targets = rng.integers(0, 8, (steps, p, 3))

    def on_one_rank(rank):
        return harness.train({"ddp_attach": ddp_attach, "ddp_finish": ddp_finish}, torch.as_tensor(tokens[:, rank]),
                             torch.as_tensor(targets[:, rank]), 1, 8, 6, 8, cap_bytes, 0.5)

    try:
        results = run_ranks(on_one_rank, p, [(rank,) for rank in range(p)], timeout=10)
    except RanksFailed as failure:
        print(failure)
        return
    for entry in results[0]["steps"][0]:
        if entry["kind"] == "grad":
            print(f"  gradient of {harness.NAMES[entry['param']]} accumulated")
        elif entry["kind"] == "all_reduce":
            print(f"all_reduce posted: {entry['nbytes']} bytes")
        else:
            print(f"({entry['kind']})")


show_timeline()

# %% tags=["check"]
check("ddp_matches_single_process")
### BEGIN HIDDEN TESTS
check("ddp_matches_single_process", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ddp_one_all_reduce_per_bucket")
### BEGIN HIDDEN TESTS
check("ddp_one_all_reduce_per_bucket", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ddp_overlaps_backward")
### BEGIN HIDDEN TESTS
check("ddp_overlaps_backward", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("ddp_never_waits_in_backward")
### BEGIN HIDDEN TESTS
check("ddp_never_waits_in_backward", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. On two GPUs
#
# The same training over NCCL, one GPU per rank (skipped on a machine without two GPUs).

# %% tags=["check"]
check("ddp_nccl")
### BEGIN HIDDEN TESTS
check("ddp_nccl", hidden=True)
### END HIDDEN TESTS
