"""Pipeline parallelism: GPipe, 1F1B and interleaved 1F1B schedules as data, a simulator of their time and memory, and
an executor that runs a schedule on real processes with point-to-point messages.

A schedule is one list of operations per stage (rank), run in that order. An operation is a tuple
(kind, microbatch, chunk): kind "F" (forward) or "B" (backward), the micro-batch index in [0, m),
and the model chunk the stage holds (always 0 but for the interleaved schedule, where stage s holds
chunks 0 .. v-1 and chunk c of stage s is virtual stage c * p + s of the p * v that make the model).
"""

from aisys import _validate


def _check_sizes(p, m) -> tuple[int, int]:
    return _validate.positive_int("p", p), _validate.positive_int("m", m)


def gpipe(p: int, m: int) -> list[list[tuple]]:
    """GPipe (Huang et al., 2019): every stage runs the m forwards, then the m backwards, both in micro-batch order
    (as torch.distributed.pipelining's ScheduleGPipe does). Each stage holds all m micro-batches' activations."""
    p, m = _check_sizes(p, m)
    return [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[tuple]]:
    """1F1B as PipeDream-Flush (Narayanan et al., 2021, the schedule of Megatron-LM's
    forward_backward_pipelining_without_interleaving and torch's Schedule1F1B): stage s warms up with
    min(p - s - 1, m) forwards, then alternates one forward and one backward, then cools down with the backwards
    left. Stage s holds at most min(p - s, m) micro-batches' activations, whatever m."""
    p, m = _check_sizes(p, m)
    schedule = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):  # steady state: the forward of micro-batch warmup + i, then the backward of i
            ops += [("F", warmup + i, 0), ("B", i, 0)]
        ops += [("B", i, 0) for i in range(m - warmup, m)]
        schedule.append(ops)
    return schedule


def interleaved(p: int, m: int, v: int) -> list[list[tuple]]:
    """Interleaved 1F1B (Narayanan et al., SC 2021, section 2.2; Megatron-LM's
    forward_backward_pipelining_with_interleaving): stage s holds v model chunks (virtual stages s, p + s, ...,
    (v-1)p + s). Forwards go through the chunks in groups of p micro-batches (p micro-batches through chunk 0,
    the same p through chunk 1, ...), backwards through the chunks in reverse; stage s warms up with
    2(p - s - 1) + (v - 1)p forwards (all of them when m == p), then alternates, then cools down.
    Needs m a multiple of p (Megatron's condition for this schedule)."""
    p, m = _check_sizes(p, m)
    v = _validate.positive_int("v", v)
    if m % p:
        raise ValueError(f"m must be a multiple of p for the interleaved schedule (micro-batches go through the "
                         f"chunks in groups of p): got m={m}, p={p}")
    total = m * v

    def op(kind: str, k: int) -> tuple:
        group, within = divmod(k, p * v)  # k-th forward (or backward) of this stage
        chunk = within // p
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


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """The idle fraction of a flushed pipeline with equal stages: (p - 1) / (v m + p - 1). For GPipe and 1F1B
    (v = 1), p - 1 slots of fill and drain against m of work on each stage; interleaving v chunks makes each
    slot v times shorter (Narayanan et al., 2021, section 2.2)."""
    p, m = _check_sizes(p, m)
    v = _validate.positive_int("v", v)
    return (p - 1) / (v * m + p - 1)


def _read(schedule) -> tuple[list[list[tuple]], int, int]:
    """The schedule as tuples, with m and v; ValueError naming the stage and operation unless every stage runs
    exactly one forward and one backward of each (micro-batch, chunk), the forward first."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ValueError("schedule must be a non-empty list of per-stage lists of operations")
    stages = []
    for s, ops in enumerate(schedule):
        if not isinstance(ops, (list, tuple)):
            raise ValueError(f"schedule[{s}] must be a list of operations (kind, microbatch, chunk)")
        read = []
        for op in ops:
            if not (isinstance(op, (list, tuple)) and len(op) == 3 and op[0] in ("F", "B")
                    and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in op[1:])):
                raise ValueError(f"stage {s}: {op!r} is not an operation (kind 'F' or 'B', microbatch >= 0, "
                                 "chunk >= 0)")
            read.append(tuple(op))
        stages.append(read)
    m = 1 + max((op[1] for ops in stages for op in ops), default=-1)
    v = 1 + max((op[2] for ops in stages for op in ops), default=-1)
    if m == 0:
        raise ValueError("schedule holds no operation")
    wanted = {(kind, i, c) for kind in "FB" for i in range(m) for c in range(v)}
    for s, ops in enumerate(stages):
        seen = set()
        for op in ops:
            if op in seen:
                raise ValueError(f"stage {s}: {op!r} appears twice")
            if op[0] == "B" and ("F", *op[1:]) not in seen:
                raise ValueError(f"stage {s}: {op!r} comes before its forward ('F', {op[1]}, {op[2]}): a backward "
                                 "needs the activations its forward saved")
            seen.add(op)
        missing = sorted(wanted - seen)
        if missing:
            raise ValueError(f"stage {s}: {missing[0]!r} is missing: every stage runs one forward and one backward "
                             f"of each of the {m} micro-batches and {v} chunk(s)")
    return stages, m, v


def _per_stage(name: str, value, p: int) -> list[float]:
    """A time per stage: one positive number for all, or a list of p of them."""
    if isinstance(value, (list, tuple)):
        if len(value) != p:
            raise ValueError(f"{name} must be one number or a list of p = {p} numbers, got a list of {len(value)}")
        return [_validate.positive_number(f"{name}[{s}]", t) for s, t in enumerate(value)]
    return [_validate.positive_number(name, value)] * p


def simulate(schedule, t_forward: float, t_backward: float, t_comm: float = 0.0) -> dict:
    """Run a schedule in time: each stage runs its operations in order, each as soon as its stage is free and its
    inputs have arrived. A forward of a micro-batch on virtual stage k needs its forward on k - 1, a backward needs
    its backward on k + 1 (and its own forward); a result crossing to another stage arrives t_comm later. With v
    chunks a stage's forward of one chunk takes t_forward / v (t_forward is a whole stage's), its backward
    t_backward / v. Either time may be one number for every stage or a list of p, one per stage.

    Returns {"makespan", "bubble": idle time over p * makespan, "peak": per stage the most micro-batch chunks
    forwarded and not yet backwarded, "start": per stage the start time of each operation}. ValueError naming the
    stage and operation for an invalid schedule, and for a deadlock (naming what each stuck stage waits for)."""
    t_comm = _validate.nonnegative_number("t_comm", t_comm)
    stages, m, v = _read(schedule)
    p = len(stages)
    last = p * v - 1
    forward, backward = _per_stage("t_forward", t_forward, p), _per_stage("t_backward", t_backward, p)
    duration = [{"F": forward[s] / v, "B": backward[s] / v} for s in range(p)]
    finish = {}  # (kind, microbatch, virtual stage) -> when it finished
    start = [[0.0] * len(ops) for ops in stages]
    free = [0.0] * p
    done = [0] * p

    def needs(s: int, op: tuple) -> tuple | None:
        """The operation this one waits for on another virtual stage, or None."""
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
                ready = 0.0 if need is None else finish[need] + (t_comm if need[2] % p != s else 0.0)
                begin = max(free[s], ready)
                start[s][done[s]] = begin
                free[s] = begin + duration[s][op[0]]
                finish[(op[0], op[1], op[2] * p + s)] = free[s]
                done[s] += 1
                progress = True
        if not progress:
            stuck = [f"stage {s} at {stages[s][done[s]]!r} waits for {needs(s, stages[s][done[s]])[0]} of "
                     f"micro-batch {stages[s][done[s]][1]} on stage {needs(s, stages[s][done[s]])[2] % p}"
                     for s in range(p) if done[s] < len(stages[s])]
            raise ValueError("deadlock: " + "; ".join(stuck))
    makespan = max(free)
    busy = sum(duration[s][op[0]] for s, ops in enumerate(stages) for op in ops)
    peaks = []
    for ops in stages:
        held = peak = 0
        for kind, _, _ in ops:
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return {"makespan": makespan, "bubble": 1 - busy / (p * makespan), "peak": peaks, "start": start}


def run_pipeline(ops, forwards, inputs, targets, batch: int) -> None:
    """Run this rank's operations of a schedule, on real processes (one stage per rank).

    `forwards[c](x)` computes chunk c of this stage (virtual stage c * p + rank); `inputs[i]` and `targets[i]` are
    micro-batch i (used by the first and the last virtual stage); the loss is the whole batch's mean over its
    `batch` rows of half the squared error, so each micro-batch adds its own sum over `batch`. A forward receives
    its input from the previous virtual stage (rank - 1, mod p), a backward the gradient of its output from the
    next (rank + 1, mod p); gradients accumulate in the chunks' parameters over the micro-batches (autograd adds
    into .grad). Every send is posted with isend and waited for only at the end: a blocking send could wait for
    a neighbour blocked in its own send (in 1F1B's steady state stage s sends an activation forward while stage
    s + 1 sends a gradient back), whereas a receive waits only for what the schedule makes available.
    Tags tell a micro-batch's activation from its gradient and chunk from chunk where two ranks exchange both.
    """
    import torch
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    v = len(forwards)
    last = p * v - 1
    saved = {}  # (microbatch, chunk) -> (input, output) kept from the forward for the backward
    sending = []  # (request, tensor): a tensor must live until its send completes
    for kind, i, c in ops:
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
            if k < last:  # the next virtual stage's chunk is c, or c + 1 when this is the last rank
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
    for request, _ in sending:
        request.wait()


def one_f_one_b_time(p: int, m: int, t_forward, t_backward):
    """The 1F1B schedule's [makespan, bubble] as a float64 array, for per-stage forward and backward times (lists of
    p positive numbers), no communication time: the answer key of the drill 09-drills/pipeline_bubble."""
    import numpy as np

    result = simulate(one_f_one_b(p, m), [float(t) for t in t_forward], [float(t) for t in t_backward])
    return np.array([result["makespan"], result["bubble"]], dtype=np.float64)
