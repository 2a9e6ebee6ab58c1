# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: static and continuous batching
#
# **You will learn** how an LLM server turns a stream of requests into batches: why
# *static* batching, which holds every batch until its longest member is done, wastes the
# GPU; how *continuous* (iteration-level) batching (Yu et al., "Orca", OSDI 2022) admits new
# requests at every step instead; why the memory for keys and values, not compute, decides
# how many requests run at once; what the server does when that memory runs out
# (*preemption by recompute*, as in vLLM: Kwon et al., "Efficient Memory Management for
# Large Language Model Serving with PagedAttention", SOSP 2023); and how to measure the
# result: time to first token (TTFT), time per output token (TPOT) and throughput.
#
# You will write a simulator: no model runs, only the clock. A **step** (an iteration of
# the engine) runs the model once over a batch of sequences. A request brings `prompt_len`
# tokens and wants `output_len` new ones. The step that reads its whole prompt (its
# **prefill**) produces its first output token; each later step feeds that last token back
# in (a **decode**) and produces one more. A step costs
#
# $$t_\text{step} = a + b \cdot (\text{new tokens in the step, summed over the batch}),$$
#
# where a prefill brings all the tokens it reads and a decode brings one. $a$ stands for
# reading the weights once per step (Llama-3-8B's 16 GB in bf16 take 4.8 ms at the H100's
# 3.35 TB/s), $b$ for the compute per token (about $2 \times 8 \cdot 10^9$ FLOPs at 989
# TFLOP/s: 16 µs). The real cost is the larger of the two, not their sum
# (`aisys.inference.cost`), but the sum keeps every time below easy to add up by hand.
#
# **Memory.** The keys and values of a sequence live in **blocks** of `block_size` tokens
# (vLLM's paged KV cache); the engine has `num_blocks` of them. A sequence with $L$ tokens in
# the cache holds $\lceil L / \text{block\_size} \rceil$ blocks. Before a step runs, each
# sequence in it gets the blocks for the tokens it feeds: a prefill of $P$ tokens needs
# $\lceil P / \text{block\_size} \rceil$, and a decode may need one more block when its token
# starts a new one. The last output token is never fed back, so a request holds at most
# $\lceil (\text{prompt\_len} + \text{output\_len} - 1) / \text{block\_size} \rceil$ blocks.
#
# **Rules that make the schedule unique** (the checks compare yours with the reference's,
# step for step, so follow them exactly):
#
# 1. **Queue.** Requests are served first come, first served: by `arrival`, ties in the order
#    of the list. A request can join a step only if it has arrived by the time that step
#    starts (`arrival <= clock`): one that arrives while a step runs waits for the next.
# 2. **Clock.** The clock starts at 0. A step's time is charged at its end: every token a step
#    produces is stamped with the clock *after* the step. When nothing runs and nobody has
#    arrived, the clock jumps to the next arrival.
# 3. **Admission** takes requests from the front of the queue while fewer than `max_batch`
#    requests are running and the blocks it needs are free. The first request that does not
#    fit stops admission for this step: nobody overtakes it.
#
# When grading, `aisys.inference.scheduler` (the reference) cannot be imported; NumPy can.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
from aisys_grader import checker

check = checker("07-inference/continuous_batching", globals())


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold `tokens` tokens of keys and values."""
    return math.ceil(tokens / block_size)


# The worked example of this notebook: (id, arrival in seconds, prompt_len, output_len).
example = [
    {"id": 0, "arrival": 0.0, "prompt_len": 4, "output_len": 3},
    {"id": 1, "arrival": 0.0, "prompt_len": 2, "output_len": 2},
    {"id": 2, "arrival": 1.5, "prompt_len": 3, "output_len": 2},
]
settings = {"num_blocks": 8, "block_size": 2, "max_batch": 2, "step_time": (1.0, 0.25)}

# %% [markdown]
# ## 1. Static batching
#
# Static batching is what a plain `model.generate(batch)` loop does. When nothing is running,
# take requests from the queue (rule 3) into a batch, **reserving each one's worst case**,
# $\lceil (\text{prompt\_len} + \text{output\_len} - 1) / \text{block\_size} \rceil$ blocks, up
# front, as FasterTransformer did. The first step prefills the whole batch; then every step
# decodes one token for each member that is not yet done. A member that has produced its
# last token leaves the computation and frees its blocks, but **nobody joins** until the
# whole batch is done. Nothing is ever preempted.
#
# Write `simulate_static(requests, num_blocks, block_size, max_batch, step_time)`, where
# `requests` is a list of dicts like `example` and `step_time` is `(a, b)`. Return, in the
# order of `requests`, one dict per request:
# `{"id": ..., "first_token": <time>, "finish": <time of its last token>, "preemptions": 0}`.
#
# On `example` with `settings`: step 1 (0 → 2.5 s) prefills requests 0 and 1 (6 tokens:
# 1 + 0.25 × 6), which both produce a first token at 2.5 s; step 2 (2.5 → 4.0) decodes both,
# and request 1 is done; step 3 (4.0 → 5.25) decodes request 0 alone, although request 2 has
# been waiting since 1.5 s; step 4 (5.25 → 7.0) prefills request 2, step 5 (7.0 → 8.25)
# decodes it. Expected:
#
# | id | first_token | finish | preemptions |
# |---:|---:|---:|---:|
# | 0 | 2.5 | 5.25 | 0 |
# | 1 | 2.5 | 4.0 | 0 |
# | 2 | 7.0 | 8.25 | 0 |

# %% tags=["solution"]
def simulate_static(requests: list, num_blocks: int, block_size: int, max_batch: int, step_time) -> list:
    """Serve `requests` in batches that run until their longest member is done, worst-case blocks reserved."""
    ### BEGIN SOLUTION
    a, b = step_time
    pending = sorted(requests, key=lambda r: r["arrival"])  # sorted() is stable: ties keep the list's order
    done = {}
    clock = 0.0
    while pending:
        if pending[0]["arrival"] > clock:
            clock = pending[0]["arrival"]  # idle: jump to the next arrival
        batch, free = [], num_blocks
        while pending and pending[0]["arrival"] <= clock and len(batch) < max_batch:
            worst = blocks_for(pending[0]["prompt_len"] + pending[0]["output_len"] - 1, block_size)
            if worst > free:
                break
            free -= worst
            batch.append(pending.pop(0))
        clock += a + b * sum(r["prompt_len"] for r in batch)  # the prefill: every member's first token
        for r in batch:
            done[r["id"]] = {"id": r["id"], "first_token": clock, "finish": clock, "preemptions": 0}
        for generated in range(1, max(r["output_len"] for r in batch)):
            clock += a + b * sum(r["output_len"] > generated for r in batch)  # the members still decoding
            for r in batch:
                if r["output_len"] > generated:
                    done[r["id"]]["finish"] = clock
    return [done[r["id"]] for r in requests]
    ### END SOLUTION


# %% tags=["check"]
check("simulate_static")
### BEGIN HIDDEN TESTS
check("simulate_static", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Continuous batching
#
# Continuous batching decides the batch again at **every step**. A request that has finished
# leaves at once, and a waiting one can take its place in the next step, beside the others'
# decodes. Blocks are no longer reserved for the worst case: a sequence holds only the blocks
# its tokens fill, and grows by one block when a decode crosses a block boundary. That lets
# more requests run at once, and it can run out. Each step is planned in this order:
#
# 1. **Decodes.** Every running request, in the order it was admitted (oldest first), gets the
#    blocks its decode token needs: $\lceil (\text{tokens in its cache} + 1) / \text{block\_size}
#    \rceil$ minus what it holds. While it needs more than are free, **preempt the most recently
#    admitted running request** (possibly itself): free all its blocks, remove it from the
#    running requests, count a preemption, and put it at the **front** of the queue.
# 2. **Admissions** (rule 3), *unless someone was preempted in this step*. A request admitted
#    now is prefilled in this step: it gets
#    $\lceil (\text{prompt\_len} + \text{generated}) / \text{block\_size} \rceil$ blocks,
#    where *generated* is the number of tokens it produced before it was preempted (0 for a new
#    request). A preempted request lost its cache, so it **recomputes**: its prefill reads its
#    prompt and the tokens it had generated, and that prefill produces its next token
#    (vLLM's recompute preemption). Its first-token time is the one from its first life.
# 3. **Run** the step: decodes bring 1 new token each, prefills `prompt_len + generated`.
#    At its end, every sequence in it produces a token; one that has produced `output_len`
#    tokens is done and frees its blocks.
#
# On `example`, request 2 no longer waits for request 0: it is admitted at 4.0 s, into the
# slot request 1 left, and prefilled in the same step as request 0's last decode.
#
# | id | first_token | finish | preemptions |
# |---:|---:|---:|---:|
# | 0 | 2.5 | 6.0 | 0 |
# | 1 | 2.5 | 4.0 | 0 |
# | 2 | 6.0 | 7.25 | 0 |
#
# A preemption, by hand: `preemption_example` below, with 4 blocks of 2 tokens and
# `step_time = (1.0, 0.5)`. Steps: (0 → 3.5) prefill of requests 0 and 1 (3 + 2 tokens; 2 + 1
# blocks); (3.5 → 5.5) both decode (request 1's third token needs its second block: 4 in use);
# at 5.5 request 0's fifth token needs a third block and none is free, so request 1, admitted
# after it, is preempted (it had produced 2 tokens); (5.5 → 7.0) and (7.0 → 8.5) request 0
# decodes alone: request 1, at the front of the queue, needs $\lceil (2 + 2)/2 \rceil = 2$
# blocks and only 1 is free, and request 2 (arrived at 5.0) may not overtake it; (8.5 → 12.0)
# request 1 prefills its 4 tokens and request 2 its one. Expected:
#
# | id | first_token | finish | preemptions |
# |---:|---:|---:|---:|
# | 0 | 3.5 | 8.5 | 0 |
# | 1 | 3.5 | 12.0 | 1 |
# | 2 | 12.0 | 12.0 | 0 |

# %%
preemption_example = [
    {"id": 0, "arrival": 0.0, "prompt_len": 3, "output_len": 4},
    {"id": 1, "arrival": 0.0, "prompt_len": 2, "output_len": 3},
    {"id": 2, "arrival": 5.0, "prompt_len": 1, "output_len": 1},
]


# %% tags=["solution"]
def simulate_continuous(requests: list, num_blocks: int, block_size: int, max_batch: int, step_time) -> list:
    """Serve `requests` with iteration-level scheduling: admit every step, preempt the newest when blocks run out."""
    ### BEGIN SOLUTION
    a, b = step_time
    state = {r["id"]: {"request": r, "generated": 0, "cached": 0, "blocks": 0, "preemptions": 0,
                       "first_token": None, "finish": None} for r in requests}
    pending = sorted(requests, key=lambda r: r["arrival"])
    waiting, running = [], []  # ids; running in admission order
    free, clock = num_blocks, 0.0
    while pending or waiting or running:
        while pending and pending[0]["arrival"] <= clock:
            waiting.append(pending.pop(0)["id"])
        if not waiting and not running:
            clock = pending[0]["arrival"]
            continue
        decodes, preempted = [], False
        for rid in list(running):
            if rid not in running:  # preempted earlier in this loop
                continue
            s = state[rid]
            need = blocks_for(s["cached"] + 1, block_size) - s["blocks"]
            while need > free and rid in running:
                victim = state[running.pop()]  # the most recently admitted
                free += victim["blocks"]
                victim["blocks"] = victim["cached"] = 0
                victim["preemptions"] += 1
                waiting.insert(0, victim["request"]["id"])
                preempted = True
            if rid in running:
                s["blocks"] += need
                free -= need
                decodes.append(rid)
        prefills = []
        while not preempted and waiting and len(running) < max_batch:
            s = state[waiting[0]]
            tokens = s["request"]["prompt_len"] + s["generated"]  # a preempted request recomputes its output
            need = blocks_for(tokens, block_size)
            if need > free:
                break
            running.append(waiting.pop(0))
            s["blocks"], free = need, free - need
            prefills.append((s, tokens))
        clock += a + b * (len(decodes) + sum(tokens for _, tokens in prefills))
        for s, tokens in [(state[rid], 1) for rid in decodes] + prefills:
            s["cached"] += tokens
            s["generated"] += 1
            if s["first_token"] is None:
                s["first_token"] = clock
            if s["generated"] == s["request"]["output_len"]:
                s["finish"] = clock
                running.remove(s["request"]["id"])
                free += s["blocks"]
    return [{"id": r["id"], "first_token": state[r["id"]]["first_token"], "finish": state[r["id"]]["finish"],
             "preemptions": state[r["id"]]["preemptions"]} for r in requests]
    ### END SOLUTION


# %% tags=["check"]
check("continuous_without_preemption")
### BEGIN HIDDEN TESTS
check("continuous_without_preemption", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("continuous_with_preemption")
### BEGIN HIDDEN TESTS
check("continuous_with_preemption", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Latency and throughput
#
# A server is judged by what its users wait for:
#
# - **TTFT**, time to first token: `first_token - arrival` (queueing and prefill; what a chat
#   user stares at before the answer starts);
# - **TPOT**, time per output token *after the first*: `(finish - first_token) / (output_len - 1)`,
#   defined only for requests of 2 or more output tokens (the pace at which the answer streams);
# - **throughput**: all output tokens divided by the makespan, from the first arrival to the
#   last finish (what the operator pays for).
#
# Write `latency_metrics(requests, results)`, `results` as your simulators return them, giving
# `{"ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "throughput"}`: medians and 99th
# percentiles as `np.percentile` computes them (its default, linear interpolation), the TPOT
# percentiles over the requests that have a TPOT, and `float("nan")` when none has.

# %% tags=["solution"]
def latency_metrics(requests: list, results: list) -> dict:
    """p50 and p99 of TTFT and TPOT, and output tokens per second over the makespan."""
    ### BEGIN SOLUTION
    ttft = [res["first_token"] - req["arrival"] for req, res in zip(requests, results)]
    tpot = [(res["finish"] - res["first_token"]) / (req["output_len"] - 1)
            for req, res in zip(requests, results) if req["output_len"] > 1]
    makespan = max(res["finish"] for res in results) - min(req["arrival"] for req in requests)
    metrics = {"throughput": sum(req["output_len"] for req in requests) / makespan}
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 99):
            metrics[f"{name}_p{q}"] = float(np.percentile(values, q)) if values else float("nan")
    return metrics
    ### END SOLUTION


# %% tags=["check"]
check("latency_metrics")
### BEGIN HIDDEN TESTS
check("latency_metrics", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Static against continuous on a busier trace
#
# A synthetic trace: requests arrive as a Poisson process, prompts and outputs have long-tailed
# (lognormal) lengths, as in real chat logs. The step cost is about Llama-3-8B's on an H100
# ($a$ = 4.8 ms, $b$ = 16 µs per token); 2000 blocks of 16 tokens hold 32,000 tokens of cache.
# Run it, then try a smaller `num_blocks` (300: watch the preemptions and the TPOT), or a
# higher `rate`. Static batching loses twice: a request that arrives just after a batch
# starts waits for the batch's *longest* member (TTFT), and the batch thins out as its short
# members finish while the GPU still pays $a$ per step for fewer and fewer tokens (throughput).

# %%
def poisson_trace(n: int, rate: float, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    prompts = np.clip(rng.lognormal(np.log(100), 1.0, n), 1, 2048).astype(int)
    outputs = np.clip(rng.lognormal(np.log(60), 0.8, n), 1, 1024).astype(int)
    return [{"id": i, "arrival": float(t), "prompt_len": int(p), "output_len": int(o)}
            for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


trace = poisson_trace(200, rate=50.0)
engine = {"num_blocks": 2000, "block_size": 16, "max_batch": 32, "step_time": (4.8e-3, 1.6e-5)}
results = {"static": simulate_static(trace, **engine), "continuous": simulate_continuous(trace, **engine)}
summary = {name: latency_metrics(trace, res) for name, res in results.items()}
for name, m in summary.items():
    preemptions = sum(r["preemptions"] for r in results[name])
    print(f"{name:>10}: {m['throughput']:7.0f} tokens/s   TTFT p50 {m['ttft_p50'] * 1e3:7.1f} ms, "
          f"p99 {m['ttft_p99'] * 1e3:7.1f} ms   TPOT p50 {m['tpot_p50'] * 1e3:5.1f} ms, "
          f"p99 {m['tpot_p99'] * 1e3:5.1f} ms   {preemptions} preemptions")

fig, axes = plt.subplots(1, 3, figsize=(11, 3))
for ax, (key, label, scale) in zip(axes, [("throughput", "output tokens / s", 1), ("ttft", "TTFT (ms)", 1e3),
                                          ("tpot", "TPOT (ms)", 1e3)]):
    names = list(summary)
    if key == "throughput":
        ax.bar(names, [summary[n][key] for n in names], color=["tab:gray", "tab:blue"])
    else:
        x = np.arange(len(names))
        ax.bar(x - 0.2, [summary[n][f"{key}_p50"] * scale for n in names], 0.4, label="p50")
        ax.bar(x + 0.2, [summary[n][f"{key}_p99"] * scale for n in names], 0.4, label="p99")
        ax.set_xticks(x, names)
        ax.legend()
    ax.set_title(label)
fig.tight_layout()
