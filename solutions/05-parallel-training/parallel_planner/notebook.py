# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: a memory and time planner for parallel training
#
# **You will learn** to count, before renting a single GPU, what one GPU holds when a transformer trains
# under data (DP), tensor (TP) and pipeline (PP) parallelism with ZeRO and activation recomputation, how
# long a step takes, and which layout is fastest among those that fit. The memory terms follow
# Rajbhandari et al., "ZeRO" (SC 2020, section 3.1) and Korthikanti et al., "Reducing Activation
# Recomputation in Large Transformer Models" (MLSys 2023, section 4, Table 2); the layout rules follow
# Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
# (SC 2021, section 3). Your activation formula is checked against memory **measured** on a small model.
#
# **Conventions** (the checks rely on every one of them):
#
# - A **model** is a dict `{"layers": L, "hidden": h, "heads": a, "kv_heads": nkv, "ffn": f, "vocab": V,
#   "tied": bool, "gated": bool}`. Head size `hs = h / a`. Each layer: a norm with a weight of `h` (no
#   bias), Q (`h x a hs`), K and V (`h x nkv hs` each: grouped-query attention), the output projection
#   (`a hs x h`), a second norm (`h`), and the MLP: `h x f` then `f x h`, or when `gated` (SwiGLU) two
#   `h x f` matrices (gate and up) and `f x h`. No biases, no position embeddings. Around the layers: the
#   embedding `V x h`, a final norm `h`, and an output head `h x V` unless `tied` (then it is the embedding).
# - A **layout** is a dict `{"dp": d, "tp": t, "pp": p, "zero": 0..3, "recompute": "none" | "selective" |
#   "full", "sequence_parallel": bool}`. Ranks are numbered TP fastest, then PP, then DP.
# - A batch: each of the d replicas runs `micro_batches` (m) micro-batches of `micro_batch` (b) sequences
#   of `seq` (s) tokens per step.
# - **Errors**: `memory_per_gpu` and `step_time` raise `ValueError` when `dp * tp * pp != gpus` (the message
#   names `gpus`), and when `heads`, `kv_heads` or `ffn` is not divisible by `tp` (the message names the one
#   that is not, e.g. `heads`), or `layers` not by `pp` (naming `layers`).
#
# **Memory per GPU** (bytes, integers) is that of a GPU of the **first pipeline stage**, returned as
# `{"parameters", "gradients", "optimizer", "activations", "total"}`:
#
# - Its parameters `n`: its `L/p` layers' matrices divided by `t` (norm weights are replicated on the TP
#   ranks), plus the input embedding's `ceil(V/t)` rows of `h`; when `p == 1` also the final norm and,
#   untied, the output head (`ceil(V/t) x h`). (With `p > 1` the head and final norm live on the last stage.)
# - Mixed precision with Adam: 2 bytes of weights, 2 of gradients, 12 of optimizer state (fp32 master
#   weights, momentum, variance) per parameter. ZeRO over the `d` replicas: stage 1 shards the optimizer
#   state, stage 2 also the gradients, stage 3 also the weights; a shard holds `ceil(n / d)` parameters.
# - Activations: `activations_per_layer` (section 2) times `L/p` layers times the micro-batches the first
#   stage holds at once under 1F1B, `min(m, p)`. ZeRO shards model states, never activations.
#
# **Time per step** (seconds, floats), returned as `{"compute", "bubble", "tp", "pp", "dp", "dp_exposed",
# "bubble_fraction", "total"}`, for a `cluster` dict `{"gpus_per_node", "memory" (bytes), "peak_flops",
# "intra_bandwidth", "intra_alpha", "inter_bandwidth", "inter_alpha"}` (bandwidths one way, bytes/s; α
# seconds per message):
#
# - `compute = F N D / (gpus x peak_flops x utilisation)` with `N = parameter_count(model)`, `D = d m b s`
#   tokens, `F = 6` (forward 2, backward 4), 8 with full recomputation (the forward runs twice).
# - `bubble = compute x (p - 1) / m`; `bubble_fraction = (p - 1) / (m + p - 1)`, the bubble's share of
#   compute + bubble.
# - `tp`: per layer of the stage and per micro-batch, 4 all-reduces (6 with full recomputation) of a
#   `(s, b, h)` activation in 2 bytes, each a ring all-reduce on `t` ranks (`ring_all_reduce_seconds`
#   below); 0 when `t == 1`. Not overlapped. Sequence parallelism changes nothing here (a reduce-scatter and
#   an all-gather cost the same as the all-reduce).
# - `pp`: `2 m` point-to-point messages of that activation, `alpha + nbytes / bandwidth` each; 0 when
#   `p == 1`. Not overlapped.
# - `dp`: a ring all-reduce on `d` ranks of the stage's gradients (2 bytes x `n`, the parameters before
#   ZeRO); ZeRO 1 and 2 the same; ZeRO 3 1.5 times it (3Ψ against 2Ψ); 0 when `d == 1`. It overlaps the
#   backward pass of the last micro-batch, `compute / m x 4/6` (`x 6/8` with full recomputation), so
#   `dp_exposed = max(0, dp - that)`.
# - `total = compute + bubble + tp + pp + dp_exposed`.
# - A group's link: a group of `size` ranks `stride` apart lies inside one node when
#   `gpus_per_node % (stride * size) == 0` (TP: stride 1, size t; PP: stride t, size p; DP: stride t p,
#   size d); inside it uses `intra_*`, otherwise `inter_*`.
#
# In each function, replace `raise NotImplementedError()` with your code, then run the check below it. When
# grading, hidden checks run many more cases, and `aisys.parallel.planner` (the reference) cannot be imported.

# %%
from aisys_grader import checker

check = checker("05-parallel-training/parallel_planner", globals())


def ring_all_reduce_seconds(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """A ring all-reduce of an `nbytes` buffer on `ranks` ranks: 2(p-1) α + 2(p-1)/p n β (chapter 6)."""
    p = ranks
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta


GPT3_175B = {"layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 4 * 12288, "vocab": 50257,
             "tied": True, "gated": False}
H100_CLUSTER = {"gpus_per_node": 8, "memory": 80e9, "peak_flops": 989.4e12,  # H100 SXM datasheet, dense bf16
                "intra_bandwidth": 450e9, "intra_alpha": 3.4e-6,  # NVLink 4, one way; NCCL's ring step (Simple)
                "inter_bandwidth": 50e9, "inter_alpha": 14e-6}  # one 400 Gb/s InfiniBand NDR port per GPU

# %% [markdown]
# ## 1. Counting parameters
#
# `parameter_count(model)` returns the number of parameters of the whole model, as the conventions above
# lay it out (a tied head counts once). The check builds the same model in torch on the **meta device**
# (shapes without memory) and counts its `parameters()`.

# %% tags=["solution"]
def parameter_count(model: dict) -> int:
    """Parameters of embedding, layers, final norm and (untied) head: the N of 6ND."""
    ### BEGIN SOLUTION
    h, a, nkv, f, V = model["hidden"], model["heads"], model["kv_heads"], model["ffn"], model["vocab"]
    hs = h // a
    layer = 2 * a * hs * h + 2 * nkv * hs * h + (3 if model["gated"] else 2) * h * f + 2 * h
    return V * h + model["layers"] * layer + h + (0 if model["tied"] else V * h)
    ### END SOLUTION


# %% tags=["check"]
check("parameter_count")
### BEGIN HIDDEN TESTS
check("parameter_count", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Memory per GPU
#
# **Activations.** Korthikanti et al. (section 4.1) count, tensor by tensor, what one layer keeps for its
# backward pass for one micro-batch: activations in 2 bytes, dropout masks in 1. Written for this model
# (`h_kv = nkv hs`):
#
# | kept tensor | bytes | under TP |
# | --- | --- | --- |
# | inputs of the norms, of QKV, of the MLP; two dropout masks | $2+2+2+2+1+1 = 10\,sbh$ | replicated |
# | Q; K and V | $2sbh + 4sbh_{kv}$ | split by $t$ |
# | input of the output projection | $2sbh$ | split by $t$ |
# | MLP inside: GeLU's and down's inputs; gated: gate, up, SiLU(gate), product | $4sbf$ or $8sbf$ | split by $t$ |
# | softmax output, its dropout mask, the dropout's output ($a$ heads of $s \times s$) | $5as^2b$ | split by $t$ |
#
# With $h_{kv} = h$ and $f = 4h$ this is the paper's $sbh\,(34 + 5as/h)$. **Tensor parallelism** divides
# the split rows by $t$ and leaves the replicated $10sbh$ (Table 2: $sbh(10 + 24/t + 5as/ht)$); **sequence
# parallelism** splits those along the sequence, so everything is divided by $t$. **Selective
# recomputation** drops the $5as^2b$ term (the attention core is recomputed from Q, K, V). **Full
# recomputation** keeps only the layer's input, $2sbh$ ($2sbh/t$ with sequence parallelism). The table
# leaves out the norms' statistics (a few bytes per token), the embedding's and the output layer's
# activations, and any temporary buffer: the check below measures how much that leaves out.
#
# `memory_per_gpu(model, layout, gpus, micro_batch, seq, micro_batches)` returns the dict of the
# conventions. All divisions above are exact once the layout is valid; return integers.

# %% tags=["solution"]
def check_layout(model: dict, layout: dict, gpus: int) -> None:
    """ValueError, naming the argument, for a layout this model and GPU count cannot run."""
    ### BEGIN SOLUTION
    d, t, p = layout["dp"], layout["tp"], layout["pp"]
    if d * t * p != gpus:
        raise ValueError(f"dp * tp * pp must equal gpus: {d} * {t} * {p} != gpus = {gpus}")
    for key in ("heads", "kv_heads", "ffn"):
        if model[key] % t:
            raise ValueError(f"{key} ({model[key]}) must be divisible by tp ({t})")
    if model["layers"] % p:
        raise ValueError(f"layers ({model['layers']}) must be divisible by pp ({p})")
    ### END SOLUTION


def parameters_on_gpu(model: dict, layout: dict) -> int:
    """Parameters a GPU of the first stage holds before ZeRO."""
    ### BEGIN SOLUTION
    t, p, h = layout["tp"], layout["pp"], model["hidden"]
    matrices = parameter_count({**model, "layers": 1, "vocab": 1, "tied": True}) - 4 * h  # one layer, no norms
    rows = -(-model["vocab"] // t)
    n = model["layers"] // p * (matrices // t + 2 * h) + rows * h
    if p == 1:
        n += h + (0 if model["tied"] else rows * h)
    return n
    ### END SOLUTION


def activations_per_layer(model: dict, layout: dict, micro_batch: int, seq: int) -> int:
    """Bytes one layer keeps for one micro-batch on one GPU (Korthikanti et al., Table 2, for this model)."""
    ### BEGIN SOLUTION
    b, s, t, sp = micro_batch, seq, layout["tp"], layout["sequence_parallel"]
    h, a, f = model["hidden"], model["heads"], model["ffn"]
    h_kv = model["kv_heads"] * (h // a)
    if layout["recompute"] == "full":
        return 2 * s * b * h // (t if sp else 1)
    replicated = 10 * s * b * h
    split = s * b * (4 * h + 4 * h_kv + (8 if model["gated"] else 4) * f)
    if layout["recompute"] == "none":
        split += 5 * a * s * s * b
    return (replicated // t if sp else replicated) + split // t
    ### END SOLUTION


def memory_per_gpu(model: dict, layout: dict, gpus: int, micro_batch: int, seq: int, micro_batches: int) -> dict:
    """Bytes on a GPU of the first pipeline stage, by term."""
    ### BEGIN SOLUTION
    check_layout(model, layout, gpus)
    d, p, zero = layout["dp"], layout["pp"], layout["zero"]
    n = parameters_on_gpu(model, layout)
    shard = -(-n // d)
    memory = {"parameters": 2 * (shard if zero >= 3 else n),
              "gradients": 2 * (shard if zero >= 2 else n),
              "optimizer": 12 * (shard if zero >= 1 else n)}
    in_flight = min(micro_batches, p)  # 1F1B: the first stage holds p micro-batches at once
    memory["activations"] = activations_per_layer(model, layout, micro_batch, seq) * (model["layers"] // p) * in_flight
    memory["total"] = sum(memory.values())
    return memory
    ### END SOLUTION


# %% tags=["check"]
check("model_states")
### BEGIN HIDDEN TESTS
check("model_states", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("activations")
### BEGIN HIDDEN TESTS
check("activations", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# **Measured.** `aisys.parallel.toy_transformer` builds one such layer in torch (bf16, dropout as
# `torch.native_dropout`, which keeps a 1-byte mask) and measures what its backward pass keeps: a
# saved-tensor hook (`torch.autograd.graph.saved_tensors_hooks`) sees every tensor autograd saves, and the
# unique storages behind them (parameters excluded) are added up. The check compares your
# `activations_per_layer` (via `memory_per_gpu` with one GPU) with that measurement, within 10%, for each
# recomputation. What the formula does not count shows up as the difference: the norms' mean and
# reciprocal standard deviation, 2 x 2 bytes per token per norm.

# %%
from aisys.parallel import toy_transformer

small = {"layers": 1, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn": 176, "vocab": 100, "tied": True,
         "gated": True}
for recompute in ("none", "selective", "full"):
    one_gpu = {"dp": 1, "tp": 1, "pp": 1, "zero": 0, "recompute": recompute, "sequence_parallel": False}
    measured = toy_transformer.saved_activation_bytes(small, micro_batch=2, seq=32, recompute=recompute)
    print(f"{recompute:9} measured {measured:7d} B   formula {activations_per_layer(small, one_gpu, 2, 32):7d} B")

# %% tags=["check"]
check("measured_activations")
### BEGIN HIDDEN TESTS
check("measured_activations", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Time per step
#
# `step_time(model, layout, gpus, micro_batch, seq, micro_batches, cluster, utilisation)` returns the dict
# of the conventions. `utilisation` is the fraction of the peak the GPU's matrix multiplies reach (0.4 to
# 0.55 in Narayanan et al.'s Table 1). Validate the layout as `memory_per_gpu` does.

# %% tags=["solution"]
def within_node(stride: int, size: int, gpus_per_node: int) -> bool:
    """Whether a group of `size` ranks `stride` apart lies inside one node."""
    ### BEGIN SOLUTION
    return gpus_per_node % (stride * size) == 0
    ### END SOLUTION


def step_time(model: dict, layout: dict, gpus: int, micro_batch: int, seq: int, micro_batches: int, cluster: dict,
              utilisation: float) -> dict:
    """Seconds of one training step, by term."""
    ### BEGIN SOLUTION
    check_layout(model, layout, gpus)
    d, t, p, m = layout["dp"], layout["tp"], layout["pp"], micro_batches
    g, full = cluster["gpus_per_node"], layout["recompute"] == "full"

    def link(inside):
        prefix = "intra" if inside else "inter"
        return cluster[f"{prefix}_alpha"], 1 / cluster[f"{prefix}_bandwidth"]

    flops = (8 if full else 6) * parameter_count(model) * d * m * micro_batch * seq
    compute = flops / (gpus * cluster["peak_flops"] * utilisation)
    bubble = compute * (p - 1) / m
    activation = 2 * micro_batch * seq * model["hidden"]
    tp = pp = dp = exposed = 0.0
    if t > 1:
        alpha, beta = link(within_node(1, t, g))
        tp = model["layers"] // p * m * (6 if full else 4) * ring_all_reduce_seconds(activation, t, alpha, beta)
    if p > 1:
        alpha, beta = link(within_node(t, p, g))
        pp = 2 * m * (alpha + activation * beta)
    if d > 1:
        alpha, beta = link(within_node(t * p, d, g))
        dp = ring_all_reduce_seconds(2 * parameters_on_gpu(model, layout), d, alpha, beta)
        dp *= 1.5 if layout["zero"] == 3 else 1.0
        exposed = max(0.0, dp - compute / m * (6 / 8 if full else 4 / 6))
    return {"compute": compute, "bubble": bubble, "tp": tp, "pp": pp, "dp": dp, "dp_exposed": exposed,
            "bubble_fraction": (p - 1) / (m + p - 1), "total": compute + bubble + tp + pp + exposed}
    ### END SOLUTION


# %% tags=["check"]
check("step_time")
### BEGIN HIDDEN TESTS
check("step_time", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("invalid_layouts")
### BEGIN HIDDEN TESTS
check("invalid_layouts", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The best layout
#
# `best_layout(model, gpus, global_batch, micro_batch, seq, cluster, utilisation)` searches every layout:
# `d t p = gpus` with `t` dividing `heads`, `kv_heads` and `ffn`, `p` dividing `layers`, and `d b`
# dividing `global_batch` (sequences per step; each replica then runs `m = global_batch / (d b)`
# micro-batches); every ZeRO stage 0-3, every recomputation; sequence parallelism off, and also on where
# `t > 1`. Of those whose `memory_per_gpu(...)["total"]` is at most `cluster["memory"]`, return the one
# with the smallest `step_time(...)["total"]`. Ties: step times within a relative `1e-9` of the fastest
# are equal (ZeRO 0, 1 and 2 cost the same time); among them take the least memory, then the first in the
# order `t`, `p` ascending, ZeRO 0 to 3, recomputation none, selective, full, sequence parallelism off
# before on. Return that layout's dict, or `None` when no layout fits.

# %% tags=["solution"]
def best_layout(model: dict, gpus: int, global_batch: int, micro_batch: int, seq: int, cluster: dict,
                utilisation: float):
    """The fastest layout that fits in the GPU's memory, or None."""
    ### BEGIN SOLUTION
    candidates = []
    for t in range(1, gpus + 1):
        for p in range(1, gpus + 1):
            if gpus % (t * p) or any(model[key] % t for key in ("heads", "kv_heads", "ffn")) or model["layers"] % p:
                continue
            d = gpus // (t * p)
            if global_batch % (d * micro_batch):
                continue
            m = global_batch // (d * micro_batch)
            for zero in range(4):
                for recompute in ("none", "selective", "full"):
                    for sp in ((False, True) if t > 1 else (False,)):
                        layout = {"dp": d, "tp": t, "pp": p, "zero": zero, "recompute": recompute,
                                  "sequence_parallel": sp}
                        memory = memory_per_gpu(model, layout, gpus, micro_batch, seq, m)["total"]
                        if memory <= cluster["memory"]:
                            seconds = step_time(model, layout, gpus, micro_batch, seq, m, cluster, utilisation)
                            candidates.append((seconds["total"], memory, len(candidates), layout))
    if not candidates:
        return None
    fastest = min(entry[0] for entry in candidates)
    return min((entry for entry in candidates if entry[0] <= fastest * (1 + 1e-9)), key=lambda e: e[1:3])[3]
    ### END SOLUTION


# %% tags=["check"]
check("best_layout")
### BEGIN HIDDEN TESTS
check("best_layout", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# GPT-3 175B (Brown et al., 2020) on 1024 H100s, 1536 sequences of 2048 tokens a step, at half the peak:

# %%
best = best_layout(GPT3_175B, 1024, 1536, 1, 2048, H100_CLUSTER, 0.5)
print(best)
m = 1536 // best["dp"]
print({k: f"{v / 1e9:.1f} GB" for k, v in memory_per_gpu(GPT3_175B, best, 1024, 1, 2048, m).items()})
print({k: round(v, 3) for k, v in step_time(GPT3_175B, best, 1024, 1, 2048, m, H100_CLUSTER, 0.5).items()})

# %% [markdown]
# **Think about it** (not graded). Narayanan et al. trained this model with t = 8, p = 16, d = 8 (their
# Table 1), without sequence parallelism or selective recomputation, which came a year later. Which of
# this model's assumptions make t = 8 cost more than it did for them? What would change if the DP
# all-reduce could not overlap at all?
