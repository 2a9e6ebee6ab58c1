# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: planning activation checkpoints
#
# **You will learn** to predict what activation checkpointing (recomputation) does to a training step's memory
# and compute, and to choose which activations to keep under a memory budget with the least recomputation.
# Training keeps every layer's saved activations from the forward pass until its backward pass; dropping most of
# them and recomputing each stretch of layers from a kept one trades compute for memory (Chen et al. 2016,
# "Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174, section 4). Chen's rule keeps one checkpoint
# every $\sqrt{n}$ layers; when layers differ in size and cost, a dynamic programme over segments finds the best
# plan exactly (Checkmate, Jain et al., MLSys 2020, solves general graphs optimally; a chain is the easy case).
# Your simulator's prediction is compared with `torch.utils.checkpoint` measured with saved-tensor hooks.
#
# **The model (every convention the checks rely on).**
# - A chain of $n \ge 1$ layers, numbered `0 .. n-1`: $x_0 \to$ layer 0 $\to x_1 \to \dots \to$ layer $n-1$.
#   Layer `i` saves `a[i]` bytes for its backward pass (its input $x_i$, as a `Linear` layer does) and costs
#   `c[i]` to run forward once. `a` and `c` are lists of `n` ints `>= 0`.
# - A **plan** is a list of **checkpoint** layers. Layer 0 is always a checkpoint (the chain's input is always
#   kept: it is what the first stretch is recomputed from), listed or not. The checkpoints cut the chain into
#   **segments**: a segment runs from a checkpoint `j` to `k`, the layer before the next checkpoint (or the last
#   layer, `n - 1`). Plans given to `simulate` hold distinct layers in `[0, n)`, in any order.
# - **Forward.** A one-layer segment (`k == j`) runs normally and saves `a[j]`. A longer one runs as
#   `torch.utils.checkpoint.checkpoint` does: it saves only its input, which is `a[j]` bytes (the tensor layer `j`
#   would save), and its layers save nothing. So after the forward pass the bytes saved, `held`, are `a` summed
#   over the checkpoints.
# - **Backward**, last segment first. A longer segment first reruns all its layers `j .. k` from its saved input:
#   that costs `c[j] + ... + c[k]` (checkpoint reruns the whole segment, its last layer too) and saves
#   `a[j] .. a[k]` again (`a[j]` is the same tensor as the checkpoint's, counted once), **all alive at once**
#   before the backward through the segment frees them and its input. A one-layer segment recomputes nothing.
#   Checkpoints of earlier segments stay held until their own segment's backward.
# - **Memory** counts saved activations only: not the parameters, not the gradients, not the values the forward
#   pass holds for a moment. The **peak** is the most bytes saved at once over the whole step: the largest, over
#   segments `j..k`, of ($a$ over the checkpoints before `j`) + `a[j] + ... + a[k]`. The **recomputation** is the
#   total forward cost rerun.
#
# **What you write.**
# - `simulate(a, c, plan)` returns `{"peak": int, "recompute": int, "held": int}` (more keys are ignored).
# - `sqrt_plan(n)`: Chen's rule, a checkpoint every $s = \lceil \sqrt{n} \rceil$ layers: `[0, s, 2s, ...]` below
#   `n`, whatever the sizes (use `math.isqrt`: floats round).
# - `least_budget(a)`: the least peak of any plan (the smallest budget a plan fits), an int.
# - `plan_checkpoints(a, c, budget)`: a plan, as a sorted list of distinct ints starting with 0, whose peak is at
#   most `budget` (an int) with the least recomputation of all such plans. **Any** optimal plan is accepted (ties
#   are not broken for you): the checks run your plan in their own simulator and compare its recomputation with
#   the least found by trying all $2^{n-1}$ plans (up to 14 layers). When `budget < least_budget(a)`, raise
#   `ValueError` whose message names `budget` and gives the least feasible budget as an integer, e.g.
#   `"budget 5 is below the least feasible budget 6"`.
# - Every number here is an exact int: the checks compare exactly, with no tolerance. Against torch (the last
#   check), the same holds: the grader measures the bytes of saved tensors (one count per storage, parameters
#   left out) of a chain of float64 `Linear` layers run with your plan, and your `simulate`'s prediction must
#   equal them to the byte.
#
# When your work is graded, only the aisys modules in this exercise's `student_may_import` can be
# imported; the reference answers cannot.

# %%
import math

from aisys_grader import checker

check = checker("04-autograd/checkpoint_planner", globals())


def refusal(a, c, budget):
    """[kind, message] of what plan_checkpoints(a, c, budget) raises ("ValueError" or "other"), or None if it
    returns."""
    try:
        plan_checkpoints(a, c, budget)
    except NotImplementedError:
        raise
    except ValueError as error:
        return ["ValueError", str(error)]
    except Exception as error:  # any other error is reported, and judged by the check
        return ["other", str(error)]
    return None


# %% [markdown]
# ## 1. Simulate a plan
#
# Walk the step as the conventions say: the forward pass segment by segment (what each keeps), then the backward
# pass from the last segment to the first (what each recomputes and holds). Keep a running count of the bytes
# saved and its maximum. A chain to try it on: a = `[4, 1, 2, 8, 1]`, c = `[1, 2, 3, 4, 5]`, plan `[0, 3]` has
# segments `0..2` and `3..4`; it holds `4 + 8 = 12` after the forward pass, `4 + 8 + 1 = 13` while segment `3..4`
# is recomputed, then `4 + 1 + 2 = 7`: peak 13, recomputation `(4 + 5) + (1 + 2 + 3) = 15`.

# %% tags=["solution"]
def segments(n, plan):
    """The (first, last) layers of each segment the plan's checkpoints (layer 0 always one) cut n layers into."""
    ### BEGIN SOLUTION
    starts = sorted(set(plan) | {0})
    return [(j, k - 1) for j, k in zip(starts, starts[1:] + [n])]
    ### END SOLUTION


def simulate(a, c, plan):
    """{"peak", "recompute", "held"} of running the plan: forward, then backward segment by segment."""
    ### BEGIN SOLUTION
    parts = segments(len(a), plan)
    live = sum(a[j] for j, _ in parts)  # each segment keeps its input through the forward pass
    held = peak = live
    recompute = 0
    for j, k in reversed(parts):
        if k > j:  # rerun j..k from the saved input: all of the segment's activations are alive at once
            recompute += sum(c[j:k + 1])
            live += sum(a[j + 1:k + 1])
        peak = max(peak, live)
        live -= sum(a[j:k + 1])  # its backward frees them, and the checkpoint
    return {"peak": peak, "recompute": recompute, "held": held}
    ### END SOLUTION


# %%
print(simulate([4, 1, 2, 8, 1], [1, 2, 3, 4, 5], [0, 3]))  # peak 13, recompute 15, held 12

# %% tags=["check"]
check("simulate")
### BEGIN HIDDEN TESTS
check("simulate", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Chen's $\sqrt{n}$ rule
#
# With $n$ equal layers and checkpoints every $s$ layers, the peak is about $n/s$ checkpoints plus one segment of
# $s$ layers; $n/s + s$ is least at $s = \sqrt{n}$, about $2\sqrt{n}$ layers' activations instead of $n$, for one
# extra forward pass. The rule ignores the layers' sizes and costs.

# %% tags=["solution"]
def sqrt_plan(n):
    """Checkpoints 0, s, 2s, ... below n, with s = ceil(sqrt(n))."""
    ### BEGIN SOLUTION
    s = math.isqrt(n - 1) + 1
    return list(range(0, n, s))
    ### END SOLUTION


# %%
print(sqrt_plan(16), simulate([1] * 16, [1] * 16, sqrt_plan(16)))

# %% tags=["check"]
check("sqrt_plan")
### BEGIN HIDDEN TESTS
check("sqrt_plan", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The least feasible budget
#
# Put a checkpoint at `j` and end its segment at `k`: while that segment runs backward it holds
# `a[j] + ... + a[k]` above the checkpoints before `j`, and every later segment holds `a[j]` more than it would
# on its own. So the least peak of layers `j..` is a minimum over `k` of a maximum of two terms, and one pass
# from the last layer back to the first computes it for every `j`.

# %% tags=["solution"]
def least_budget(a):
    """The least peak of any plan."""
    ### BEGIN SOLUTION
    n = len(a)
    best = [0] * (n + 1)  # best[j]: the least peak of layers j.. above the checkpoints before j
    for j in range(n - 1, -1, -1):
        best[j] = min(max(sum(a[j:k + 1]), a[j] + best[k + 1]) for k in range(j, n))
    return best[0]
    ### END SOLUTION


# %% tags=["check"]
check("least_budget")
### BEGIN HIDDEN TESTS
check("least_budget", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The optimal plan under a budget
#
# The same recursion, now carrying how many bytes are left above the checkpoints so far: choosing segment `j..k`
# needs `a[j] + ... + a[k]` of that room, costs `c[j] + ... + c[k]` unless `k == j`, and leaves `a[j]` less room
# for the layers after `k`. Memoise on (first layer, room left). Keeping the layers with the largest activations,
# or Chen's evenly spaced checkpoints, are not optimal when the layers differ: the checks hold such chains.

# %% tags=["solution"]
def plan_checkpoints(a, c, budget):
    """A plan of least recomputation whose peak is at most budget; ValueError naming the least budget if none."""
    ### BEGIN SOLUTION
    least = least_budget(a)
    if budget < least:
        raise ValueError(f"budget {budget} is below the least feasible budget {least}")
    n = len(a)
    memo = {}

    def best(j, room):
        """(least recomputation, checkpoints) of layers j.. with `room` bytes left above the earlier checkpoints."""
        if j == n:
            return 0, []
        if (j, room) not in memo:
            found = (math.inf, None)
            for k in range(j, n):
                if sum(a[j:k + 1]) > room:  # longer segments hold more still
                    break
                cost = 0 if k == j else sum(c[j:k + 1])
                rest, plan = best(k + 1, room - a[j])
                if cost + rest < found[0]:
                    found = (cost + rest, [j] + plan)
            memo[j, room] = found
        return memo[j, room]

    plan = best(0, budget)[1]
    return plan
    ### END SOLUTION


# %%
a, c = [1, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 50]
budget = simulate(a, c, sqrt_plan(9))["peak"]
print(sqrt_plan(9), simulate(a, c, sqrt_plan(9)))
print(plan_checkpoints(a, c, budget), simulate(a, c, plan_checkpoints(a, c, budget)))

# %% tags=["check"]
check("plan_checkpoints")
### BEGIN HIDDEN TESTS
check("plan_checkpoints", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("budget_refused")
### BEGIN HIDDEN TESTS
check("budget_refused", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Against `torch.utils.checkpoint`
#
# The grader builds a chain of float64 `torch.nn.Linear` layers, measures what each layer saves by running it
# once without checkpointing (that is `a`; `c` is each layer's forward FLOPs), asks your `plan_checkpoints` for a
# plan under a budget, runs one training step with each longer segment under
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`, and counts the bytes of saved tensors alive with
# `torch.autograd.graph.saved_tensors_hooks` (the reentrant variant recomputes through those hooks). Your
# `simulate` must predict its peak, what it holds after the forward pass and the FLOPs it reruns, exactly.

# %% tags=["check"]
check("torch_measured")
### BEGIN HIDDEN TESTS
check("torch_measured", hidden=True)
### END HIDDEN TESTS
