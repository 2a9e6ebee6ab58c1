# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the time and bubble of a 1F1B pipeline
#
# **You will learn** to compute how long a pipeline-parallel training step takes, and how much of it the
# devices sit idle (the bubble), when the stages are NOT equally fast, where the textbook formula
# $(p-1)/(m+p-1)$ no longer holds: by simulating the 1F1B schedule (PipeDream-Flush, Narayanan et al.
# 2021; Megatron-LM's `forward_backward_pipelining_without_interleaving`). See the book's
# page on pipeline parallelism (chapter 5).
#
# **The conventions, all of them:**
# - `one_f_one_b_time(p, m, t_forward, t_backward)`: `p` stages (an int >= 1), `m` micro-batches (an
#   int >= 1), `t_forward` and `t_backward` float64 arrays of `p` positive times, stage `s` taking
#   `t_forward[s]` for the forward of one micro-batch and `t_backward[s]` for its backward.
# - The schedule is 1F1B: stage `s` runs `w = min(p - s - 1, m)` forwards `F 0 .. w-1`, then for
#   `i = 0 .. m - w - 1` the forward `F w+i` and the backward `B i`, then the backwards left in order.
# - Each stage runs its operations in that order, one at a time, each starting as soon as the stage is
#   free and its input is there: `F i` on stage `s > 0` needs `F i` on stage `s - 1` finished; `B i` on a
#   stage `s < p - 1` needs `B i` on stage `s + 1` finished (the last stage's `B i` follows its own `F i`).
#   Communication takes no time. The first operation starts at time 0.
# - Return a float64 array `[makespan, bubble]`: the makespan is the time the last operation finishes;
#   the bubble is the idle time summed over the stages divided by `p * makespan` (0 for `p = 1`).
# - Results are compared with a relative tolerance of 1e-9.

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/pipeline_bubble", globals())

# %% tags=["solution"]
def one_f_one_b_time(p, m, t_forward, t_backward) -> np.ndarray:
    """[makespan, bubble] of the 1F1B schedule on p stages with per-stage times, as float64."""
    ### BEGIN SOLUTION
    t_forward = np.asarray(t_forward, dtype=np.float64)
    t_backward = np.asarray(t_backward, dtype=np.float64)
    schedule = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", i) for i in range(m - warmup, m)]
        schedule.append(ops)
    finish = {}
    free = [0.0] * p
    done = [0] * p
    while any(done[s] < len(schedule[s]) for s in range(p)):
        for s in range(p):
            while done[s] < len(schedule[s]):
                kind, i = schedule[s][done[s]]
                need = ("F", i, s - 1) if kind == "F" and s > 0 else ("B", i, s + 1) if kind == "B" and s < p - 1 \
                    else None
                if need is not None and need not in finish:
                    break
                begin = max(free[s], finish[need] if need is not None else 0.0)
                free[s] = begin + (t_forward[s] if kind == "F" else t_backward[s])
                finish[(kind, i, s)] = free[s]
                done[s] += 1
    makespan = max(free)
    busy = m * float(np.sum(t_forward + t_backward))
    return np.array([makespan, 1 - busy / (p * makespan)], dtype=np.float64)
    ### END SOLUTION


# %% tags=["check"]
check("makespan_and_bubble")
### BEGIN HIDDEN TESTS
check("makespan_and_bubble", hidden=True)
### END HIDDEN TESTS
