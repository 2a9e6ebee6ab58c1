# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: pipeline schedules: GPipe, 1F1B, interleaved
#
# **You will learn** to write pipeline-parallel schedules as data (GPipe: Huang et al., NeurIPS 2019;
# 1F1B as PipeDream-Flush: Narayanan et al., SOSP 2019 and ICML 2021; interleaved 1F1B: Narayanan
# et al., SC 2021, section 2.2), to simulate them to see where the **bubble** $(p-1)/(m+p-1)$ and
# the activation memory come from, and to run a schedule on real processes with point-to-point
# messages, getting the same gradients as training on one process.
#
# **Conventions (everything the checks rely on).**
# - $p$ stages (ranks), $m$ micro-batches, $v$ model chunks per stage. A **schedule** is a list of $p$
#   lists, one per stage, of **operations** run in that order. An operation is `(kind, microbatch,
#   chunk)`: kind `"F"` (forward) or `"B"` (backward), micro-batch in $[0, m)$, chunk in $[0, v)$
#   (always 0 for GPipe and 1F1B). Chunk $c$ of stage $s$ is **virtual stage** $c\,p + s$ of the
#   $p\,v$ that make the model, in order. Return tuples or lists (the checks read both as lists).
# - `gpipe(p, m)`: every stage runs `F 0 .. m-1`, then `B 0 .. m-1` (micro-batch order, as
#   `torch.distributed.pipelining.ScheduleGPipe`).
# - `one_f_one_b(p, m)`: stage $s$ warms up with $w_s = \min(p - s - 1, m)$ forwards `F 0 .. w_s-1`, then
#   for $i = 0, \dots, m - w_s - 1$ runs `F w_s+i` then `B i`, then cools down with the backwards left, in
#   order (Megatron-LM's `forward_backward_pipelining_without_interleaving`, torch's `Schedule1F1B`).
# - `interleaved(p, m, v)`: Megatron-LM's `forward_backward_pipelining_with_interleaving`. Stage $s$ runs
#   $m\,v$ forwards and $m\,v$ backwards. Its $k$-th forward is on micro-batch $\lfloor k / (p v)\rfloor p
#   + (k \bmod p)$, chunk $\lfloor (k \bmod p v) / p \rfloor$; its $k$-th backward on the same micro-batch,
#   chunk $v - 1 - \lfloor (k \bmod p v) / p \rfloor$. It warms up with $w_s = \min(2(p-s-1) + (v-1)p,\ m v)$
#   forwards ($w_s = m v$, all of them, when $m = p$), then alternates forward $w_s + k$ and backward $k$,
#   then cools down. $m$ must be a multiple of $p$: otherwise raise `ValueError` whose message names `m`.
# - `bubble_fraction(p, m, v=1)`: the closed form of the idle fraction for equal stages, a float.
# - `simulate(schedule, t_forward, t_backward, t_comm=0)`: each stage runs its operations in order, each
#   starting as soon as the stage is free and its input is there. A forward of micro-batch $i$ on virtual
#   stage $k > 0$ needs the forward of $i$ on $k - 1$ finished; a backward on $k < pv - 1$ needs the backward
#   of $i$ on $k + 1$ finished (and its own forward, earlier on the same stage); when that other virtual stage
#   is on another stage, add `t_comm`. `t_forward` and `t_backward` are a whole stage's times for one
#   micro-batch: one chunk's forward takes `t_forward / v`, its backward `t_backward / v`. Return a dict:
#   `"makespan"` (the last finish; the first operation starts at 0), `"bubble"` (idle time summed over the
#   stages, over $p \cdot$ makespan), `"peak"` (per stage, the most (micro-batch, chunk) pairs forwarded and
#   not yet backwarded, an int), `"start"` (per stage, the start time of each of its operations, in its
#   order). Raise `ValueError` for an invalid schedule: an operation that is not one, one that appears twice
#   on a stage, one missing (every stage runs one F and one B of each micro-batch and chunk, with $m$ and $v$
#   one more than the largest index seen), or a backward before its forward on its stage; the message names
#   the stage as `stage s`. A schedule that cannot finish (every stage left waits for another) raises
#   `ValueError` whose message contains `deadlock` and names a stuck stage as `stage s`.
# - `run_pipeline(ops, forwards, inputs, targets, batch)` runs on each of $p$ ranks (gloo; NCCL in the GPU
#   check) with this rank's operations `ops` (lists `[kind, microbatch, chunk]`). `forwards[c](x)` computes
#   chunk $c$ of this stage (a Linear then tanh, float64: the grader built it and notes when it runs);
#   `inputs[i]`, `targets[i]` are micro-batch $i$ (`rows x width`, on every rank; the first virtual stage
#   reads `inputs`, the last `targets`). The loss is the whole batch's mean over its `batch` rows of half the
#   squared error: micro-batch $i$ adds `0.5 * ((y - targets[i]) ** 2).sum() / batch`. A forward on virtual
#   stage $k>0$ receives its input (`rows x width`, float64) from rank $(r-1) \bmod p$; one on $k < pv-1$
#   sends its output to rank $(r+1) \bmod p$; a backward on $k < pv-1$ receives the gradient of its output
#   from $(r+1) \bmod p$, and one on $k > 0$ sends the gradient of its input to $(r-1) \bmod p$. Nothing else
#   is sent, and no collective is called. Gradients accumulate in the chunks' parameters (autograd adds into
#   `.grad`) over the micro-batches; return nothing. The checks compare them with one process training on
#   the whole batch, count the messages and their sizes between neighbours, and read when each chunk's
#   forward and backward ran: the activations held must follow the schedule (its `peak`). Interleaved
#   schedules are run with $p \ge 2$.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; `aisys.parallel.pipeline` (the reference) cannot. `run_pipeline`, and every definition in this
# notebook, runs in the ranks' dialect (see chapter 6's ring all-reduce: plain Python, torch and
# torch.distributed's point-to-point functions; no `class`, `with`, or names starting with `_`).

# %%
import torch
import torch.distributed as dist

from aisys_grader import checker

check = checker("05-parallel-training/pipeline_schedules", globals())


def refusal(function, *args):
    """[kind, message] of what function(*args) raises ("ValueError" or "other"), or None if it returns."""
    try:
        if function == "interleaved":
            interleaved(*args)
        else:
            simulate(*args)
    except NotImplementedError:
        raise
    except ValueError as error:
        return ["ValueError", str(error)]
    except Exception as error:  # any other error is reported, and judged by the check
        return ["other", str(error)]
    return None


# %% [markdown]
# ## 1. GPipe and the bubble
#
# Naive model parallelism runs one batch through the stages in turn: $p - 1$ of $p$ stages are idle at any
# time. GPipe splits the batch into $m$ micro-batches: the forwards fill the pipeline in $p - 1$ steps,
# flow for $m$, and the backwards drain it. Each stage is busy $m(t_f + t_b)$ of a makespan
# $(m + p - 1)(t_f + t_b)$, so the idle fraction is $(p-1)/(m+p-1)$ whatever $t_b / t_f$.

# %% tags=["solution"]
def gpipe(p, m):
    """GPipe: all m forwards, then all m backwards, on every stage."""
    ### BEGIN SOLUTION
    return [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for s in range(p)]
    ### END SOLUTION


# %% tags=["solution"]
def bubble_fraction(p, m, v=1):
    """The idle fraction of a flushed pipeline of p equal stages, m micro-batches, v chunks per stage."""
    ### BEGIN SOLUTION
    return (p - 1) / (v * m + p - 1)
    ### END SOLUTION


# %% tags=["check"]
check("gpipe")
### BEGIN HIDDEN TESTS
check("gpipe", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("bubble_fraction")
### BEGIN HIDDEN TESTS
check("bubble_fraction", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. A simulator
#
# Loop over the stages, starting each stage's next operation as soon as what it needs has finished;
# when a whole pass starts nothing and operations remain, the schedule is deadlocked.

# %% tags=["solution"]
def simulate(schedule, t_forward, t_backward, t_comm=0):
    """Makespan, bubble fraction, peak activations per stage and start times of a schedule."""
    ### BEGIN SOLUTION
    stages = [[tuple(op) for op in ops] for ops in schedule]
    for s, ops in enumerate(stages):
        for op in ops:
            if not (len(op) == 3 and op[0] in ("F", "B") and isinstance(op[1], int) and isinstance(op[2], int)
                    and op[1] >= 0 and op[2] >= 0):
                raise ValueError(f"stage {s}: {op} is not an operation")
    m = 1 + max(op[1] for ops in stages for op in ops)
    v = 1 + max(op[2] for ops in stages for op in ops)
    for s, ops in enumerate(stages):
        seen = set()
        for op in ops:
            if op in seen:
                raise ValueError(f"stage {s}: {op} appears twice")
            if op[0] == "B" and ("F", op[1], op[2]) not in seen:
                raise ValueError(f"stage {s}: {op} comes before its forward")
            seen.add(op)
        if len(seen) != 2 * m * v:
            raise ValueError(f"stage {s}: an operation is missing ({m} micro-batches, {v} chunks)")
    p = len(stages)
    last = p * v - 1
    duration = {"F": t_forward / v, "B": t_backward / v}
    finish = {}  # (kind, microbatch, virtual stage) -> finish time
    start = [[0.0] * len(ops) for ops in stages]
    free = [0.0] * p
    done = [0] * p

    def needs(s, op):
        kind, i, c = op
        k = c * p + s
        if kind == "F" and k > 0:
            return ("F", i, k - 1)
        if kind == "B" and k < last:
            return ("B", i, k + 1)
        return None

    while any(done[s] < len(stages[s]) for s in range(p)):
        progress = False
        for s in range(p):
            while done[s] < len(stages[s]):
                op = stages[s][done[s]]
                need = needs(s, op)
                if need is not None and need not in finish:
                    break
                ready = 0.0
                if need is not None:
                    ready = finish[need] + (t_comm if need[2] % p != s else 0.0)
                begin = max(free[s], ready)
                start[s][done[s]] = begin
                free[s] = begin + duration[op[0]]
                finish[(op[0], op[1], op[2] * p + s)] = free[s]
                done[s] += 1
                progress = True
        if not progress:
            stuck = [f"stage {s} waits at {stages[s][done[s]]}" for s in range(p) if done[s] < len(stages[s])]
            raise ValueError("deadlock: " + "; ".join(stuck))
    makespan = max(free)
    busy = sum(duration[op[0]] for ops in stages for op in ops)
    peaks = []
    for ops in stages:
        held = 0
        peak = 0
        for op in ops:
            held += 1 if op[0] == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return {"makespan": makespan, "bubble": 1 - busy / (p * makespan), "peak": peaks, "start": start}
    ### END SOLUTION


# %% tags=["check"]
check("simulate")
### BEGIN HIDDEN TESTS
check("simulate", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. 1F1B
#
# GPipe holds all $m$ micro-batches' activations on every stage until its backwards start. 1F1B starts a
# backward as soon as one can run: stage $s$ warms up with $p - s - 1$ forwards, then alternates one
# forward and one backward. Same bubble, but stage $s$ never holds more than $p - s$ micro-batches.

# %% tags=["solution"]
def one_f_one_b(p, m):
    """1F1B (PipeDream-Flush): warm-up of min(p - s - 1, m) forwards on stage s, steady 1F1B, cool-down."""
    ### BEGIN SOLUTION
    schedule = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            ops += [("F", warmup + i, 0), ("B", i, 0)]
        ops += [("B", i, 0) for i in range(m - warmup, m)]
        schedule.append(ops)
    return schedule
    ### END SOLUTION


# %% tags=["check"]
check("one_f_one_b")
### BEGIN HIDDEN TESTS
check("one_f_one_b", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Interleaved 1F1B
#
# With $v$ chunks per stage each pipeline step is $v$ times shorter, so filling and draining costs $v$ times
# less: the bubble becomes $(p-1)/(v m + p - 1)$, for $v$ times the messages.

# %% tags=["solution"]
def interleaved(p, m, v):
    """Interleaved 1F1B (Megatron-LM): v chunks per stage; m must be a multiple of p."""
    ### BEGIN SOLUTION
    if m % p != 0:
        raise ValueError(f"m must be a multiple of p for the interleaved schedule: got m={m}, p={p}")
    total = m * v

    def op(kind, k):
        group = k // (p * v)
        chunk = (k % (p * v)) // p
        if kind == "B":
            chunk = v - 1 - chunk
        return (kind, group * p + k % p, chunk)

    schedule = []
    for s in range(p):
        warmup = total if m == p else min(2 * (p - s - 1) + (v - 1) * p, total)
        ops = [op("F", k) for k in range(warmup)]
        for k in range(total - warmup):
            ops += [op("F", warmup + k), op("B", k)]
        ops += [op("B", k) for k in range(total - warmup, total)]
        schedule.append(ops)
    return schedule
    ### END SOLUTION


# %% tags=["check"]
check("interleaved")
### BEGIN HIDDEN TESTS
check("interleaved", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. On real processes
#
# Each rank runs its own list. **Beware of blocking sends**: in 1F1B's steady state stage $s$ sends an
# activation forward while stage $s + 1$ sends a gradient back; with `dist.send` (gloo's waits for the
# matching receive) each waits for the other. Post sends with `dist.isend`, keep the request (and the
# tensor) and wait for them all at the end; receive with `dist.recv` in the order of your list. Where two
# ranks exchange both activations and gradients (interleaved, $p = 2$), give each message a `tag` that
# both sides compute, e.g. `2 * (microbatch * v + receiver's chunk) + (1 for a gradient)`.

# %% tags=["solution"]
def run_pipeline(ops, forwards, inputs, targets, batch):
    """Run this rank's operations: receive, compute, send; gradients accumulate over micro-batches."""
    ### BEGIN SOLUTION
    rank = dist.get_rank()
    p = dist.get_world_size()
    v = len(forwards)
    last = p * v - 1
    saved = {}
    sending = []
    for op in ops:
        kind, i, c = op[0], op[1], op[2]
        k = c * p + rank
        if kind == "F":
            if k == 0:
                x = inputs[i].clone()
            else:
                x = torch.empty_like(inputs[i])
                dist.recv(x, (rank - 1) % p, tag=2 * (i * v + c))
            x.requires_grad_()
            y = forwards[c](x)
            saved[(i, c)] = (x, y)
            if k < last:
                out = y.detach()
                sending.append((dist.isend(out, (rank + 1) % p, tag=2 * (i * v + c + (rank == p - 1))), out))
        else:
            x, y = saved.pop((i, c))
            if k == last:
                loss = 0.5 * ((y - targets[i]) ** 2).sum() / batch
                loss.backward()
            else:
                grad = torch.empty_like(y)
                dist.recv(grad, (rank + 1) % p, tag=2 * (i * v + c + (rank == p - 1)) + 1)
                y.backward(grad)
            if k > 0:
                sending.append((dist.isend(x.grad, (rank - 1) % p, tag=2 * (i * v + c) + 1), x.grad))
    for request, tensor in sending:
        request.wait()
    ### END SOLUTION


# %% tags=["check"]
check("run_pipeline")
### BEGIN HIDDEN TESTS
check("run_pipeline", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("run_pipeline_nccl")
### BEGIN HIDDEN TESTS
check("run_pipeline_nccl", hidden=True)
### END HIDDEN TESTS
