# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: the memory of a large model
#
# **You will learn** to count, from a model's configuration alone, how many parameters it has (grouped-query
# attention, tied embeddings, gated MLPs, a mixture of experts' total against active parameters), what one
# training step keeps (16 bytes per parameter under mixed precision with Adam, Rajbhandari et al., "ZeRO", SC
# 2020, section 3.1, plus the activations of Korthikanti et al., MLSys 2023, section 4.1) and what serving keeps
# (the weights and the KV cache of multi-head, grouped-query (Ainslie et al., EMNLP 2023), sliding-window (Jiang
# et al., "Mistral 7B", 2023) and multi-head latent attention (DeepSeek-AI, "DeepSeek-V2", 2024, section 2.1)).
# Memory calculators in common use get two of these wrong: they leave out the activations and count a GQA
# model's cache with its query heads. Your parameter counts are checked against a model the grader builds in
# torch on the meta device, your activations against bytes measured with saved-tensor hooks.
#
# **A model** is a dict with exactly these keys (every one always present):
#
# | key | meaning |
# | --- | --- |
# | `layers`, `hidden`, `vocab` | L layers, width h, vocabulary V |
# | `heads`, `kv_heads`, `head_dim` | a query heads, key-value heads (a multiple of it is `heads`), head width d |
# | `ffn` | the MLP width of a dense layer |
# | `tied` | the output head is the embedding matrix: count it once |
# | `gated` | SwiGLU: gate and up (h x f each) and down (f x h), three matrices; else up and down, two |
# | `bias` | every linear layer has a bias (of its output width), except the output head and the router |
# | `norm` | `"rmsnorm"`: a weight of its width; `"layernorm"`: a weight and a bias |
# | `positions` | rows of a learned position embedding (positions x h); 0 for rotary |
# | `experts`, `top_k`, `shared_experts`, `expert_ffn`, `dense_layers` | mixture of experts (below); 0 if dense |
# | `window` | sliding-window attention over the last `window` tokens; 0 for full attention |
# | `kv_rank`, `q_rank`, `rope_dim` | latent attention's d_c, d_c' and d_h^R (below); all 0 for standard attention |
#
# **Layout.** The embedding (V x h), the position embedding (positions x h), L layers, a final norm (h), and the
# output head (h x V, no bias) unless `tied`. A layer: a norm (h), attention, a norm (h), an MLP.
#
# - *Standard attention*: Q (h x a d), K and V (h x kv_heads d each), the output (a d x h).
# - *Latent attention* (`kv_rank` > 0; `kv_heads` equals `heads`): queries h x d_c' then a norm of d_c' then
#   d_c' x a (d + d_h^R), or directly h x a (d + d_h^R) when `q_rank` is 0; keys and values h x (d_c + d_h^R) (the
#   latent and one rotary key shared by the heads), a norm of d_c, then d_c x a (d + d); the output a d x h.
# - *MLP*: gated or not, of width `ffn`. An *MoE layer* (every layer from index `dense_layers` on, when
#   `experts` > 0) has instead a router (h x experts, no bias), `experts` routed MLPs and `shared_experts` shared
#   ones, each of width `expert_ffn`; a token goes through the shared ones and `top_k` routed ones.
# - A linear layer `fan_in x fan_out` has `fan_in * fan_out` weights, plus `fan_out` when `bias`.
#
# **Active parameters** are those one token's forward pass uses: every parameter except the `experts - top_k`
# routed experts of each MoE layer it skips (embedding and head counted whole). A dense model's active count is
# its total.
#
# **Training** (`training_memory`): mixed precision with Adam keeps per parameter (all experts) 2 bytes of weights,
# 2 of gradients and 12 of optimizer state (fp32 master weights, momentum, variance). **Activations** are what
# the layers keep for the backward pass, per token per layer, in bytes (activations 2 bytes, dropout masks 1),
# with q = a d, k = kv_heads d:
#
# | kept | bytes per token |
# | --- | --- |
# | the two norms' inputs, the attention's and the MLP's inputs, two dropout masks | 2h + 2h + 2h + 2h + h + h = 10h |
# | Q, K and V, the output projection's input | 2q + 4k + 2q |
# | the MLP's inner tensors: the activation's and down's inputs; gated: gate, up, SiLU(gate), product | 4f or 8f |
# | the attention scores: softmax output, its dropout mask, the dropout's output, over s keys | 5 a s |
#
# where f is `ffn` in a dense layer and (`top_k` + `shared_experts`) x `expert_ffn` in an MoE layer. With
# `flash` the scores are not kept: a fused attention keeps one fp32 logsumexp per head, 4a bytes, instead.
# `recompute="selective"` recomputes the attention core: neither scores nor logsumexp. `recompute="full"`
# keeps only each layer's input, 2h bytes per token. Multiply by batch x seq tokens and add over the layers.
# The embedding, final norm, logits and loss are left out; latent attention's activations are not asked for.
#
# **Inference** (`inference_memory`): the weights (every parameter, all experts resident) at `weight_bytes` each
# (2 for bf16, 1 for int8, 0.5 for int4) and the KV cache at `kv_bytes` per element. Per token per layer the
# cache holds K and V of each kv head, 2 kv_heads d elements; with latent attention the latent and the rotary key,
# d_c + d_h^R. With a `window` a layer caches at most the last `window` tokens of a sequence.
#
# **Results** are dicts of numbers of bytes (or parameters); the checks compare them exactly.
# **Errors**: every function raises `ValueError` naming the key when `heads` is not a multiple of `kv_heads`
# (the message contains `kv_heads`) or when `top_k` exceeds `experts` in an MoE model (it contains `top_k`).
#
# In each function, replace `raise NotImplementedError()` with your code, then run the check below it. When
# grading, hidden checks run more configurations, and the reference (`aisys.model_memory`) cannot be imported.

# %%
from aisys_grader import checker

check = checker("01-architecture/model_memory", globals())

# Configurations you can try (typed from the papers and model cards; the page discusses them).
LLAMA_2_7B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "head_dim": 128, "ffn": 11008,
              "vocab": 32000, "tied": False, "gated": True, "bias": False, "norm": "rmsnorm", "positions": 0,
              "experts": 0, "top_k": 0, "shared_experts": 0, "expert_ffn": 0, "dense_layers": 0, "window": 0,
              "kv_rank": 0, "q_rank": 0, "rope_dim": 0}
GPT3_175B = dict(LLAMA_2_7B, layers=96, hidden=12288, heads=96, kv_heads=96, head_dim=128, ffn=49152, vocab=50257,
                 tied=True, gated=False, bias=True, norm="layernorm", positions=2048)
MIXTRAL_8X7B = dict(LLAMA_2_7B, kv_heads=8, ffn=14336, experts=8, top_k=2, expert_ffn=14336, window=0)

# %% [markdown]
# ## 1. Parameters
#
# `parameter_count(model)` returns `{"total": ..., "active": ...}` (integers). Llama-2-7B has 6,738,415,616.

# %% tags=["solution"]
def parameter_count(model: dict) -> dict:
    """Total and per-token active parameters of a decoder-only transformer laid out as the conventions say."""
    ### BEGIN SOLUTION
    validate(model)
    h, a, d, bias = model["hidden"], model["heads"], model["head_dim"], model["bias"]

    def linear(fan_in, fan_out):
        return fan_in * fan_out + (fan_out if bias else 0)

    def norm(width):
        return width * (2 if model["norm"] == "layernorm" else 1)

    def mlp(width):
        return (3 if model["gated"] else 2) * h * width + ((2 * width if model["gated"] else width) + h if bias else 0)

    if model["kv_rank"]:
        c, cq, r = model["kv_rank"], model["q_rank"], model["rope_dim"]
        query = linear(h, cq) + norm(cq) + linear(cq, a * (d + r)) if cq else linear(h, a * (d + r))
        attention = query + linear(h, c + r) + norm(c) + linear(c, 2 * a * d) + linear(a * d, h)
    else:
        attention = linear(h, a * d) + 2 * linear(h, model["kv_heads"] * d) + linear(a * d, h)
    common = attention + 2 * norm(h)
    moe = model["layers"] - model["dense_layers"] if model["experts"] else 0
    dense = model["layers"] - moe
    outside = (model["vocab"] + model["positions"]) * h + norm(h) + (0 if model["tied"] else model["vocab"] * h)
    total = outside + dense * (common + mlp(model["ffn"]))
    active = total
    if moe:
        router, expert = h * model["experts"], mlp(model["expert_ffn"])
        total += moe * (common + router + (model["shared_experts"] + model["experts"]) * expert)
        active += moe * (common + router + (model["shared_experts"] + model["top_k"]) * expert)
    return {"total": total, "active": active}
    ### END SOLUTION


# %% [markdown]
# Errors: write `validate(model)` and call it first in each of your functions.

# %% tags=["solution"]
def validate(model: dict) -> None:
    """Raise ValueError naming the key when kv_heads does not divide heads, or top_k exceeds experts."""
    ### BEGIN SOLUTION
    if model["heads"] % model["kv_heads"]:
        raise ValueError(f"heads ({model['heads']}) must be a multiple of kv_heads ({model['kv_heads']})")
    if model["experts"] and not 1 <= model["top_k"] <= model["experts"]:
        raise ValueError(f"top_k ({model['top_k']}) must be between 1 and experts ({model['experts']})")
    ### END SOLUTION


# %% tags=["check"]
check("dense_parameters")
### BEGIN HIDDEN TESTS
check("dense_parameters", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("moe_parameters")
### BEGIN HIDDEN TESTS
check("moe_parameters", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("moe_active")
### BEGIN HIDDEN TESTS
check("moe_active", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Training memory
#
# `training_memory(model, batch, seq, recompute="none", flash=False)` returns `{"weights", "gradients",
# "optimizer", "activations", "total"}` in bytes, for `batch` sequences of `seq` tokens on one device, nothing
# sharded (chapter 5 shards it). The grader also measures one small layer's saved tensors on the CPU (bf16, dropout
# 0.1 with 1-byte masks, no biases) and wants your activations within 10% of them.

# %% tags=["solution"]
def training_memory(model: dict, batch: int, seq: int, recompute: str = "none", flash: bool = False) -> dict:
    """Bytes of weights, gradients, Adam's state (2 + 2 + 12 per parameter) and the activations of one step."""
    ### BEGIN SOLUTION
    validate(model)
    n = parameter_count(model)["total"]
    h, a = model["hidden"], model["heads"]
    q, k = a * model["head_dim"], model["kv_heads"] * model["head_dim"]

    def per_token(f):
        if recompute == "full":
            return 2 * h
        kept = 10 * h + 4 * q + 4 * k + (8 if model["gated"] else 4) * f
        if recompute == "none":
            kept += 4 * a if flash else 5 * a * seq
        return kept

    moe = model["layers"] - model["dense_layers"] if model["experts"] else 0
    experts_ffn = (model["top_k"] + model["shared_experts"]) * model["expert_ffn"]
    activations = batch * seq * ((model["layers"] - moe) * per_token(model["ffn"]) + moe * per_token(experts_ffn))
    memory = {"weights": 2 * n, "gradients": 2 * n, "optimizer": 12 * n, "activations": activations}
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

# %% tags=["check"]
check("measured_activations")
### BEGIN HIDDEN TESTS
check("measured_activations", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Inference memory
#
# `inference_memory(model, batch, tokens, weight_bytes=2, kv_bytes=2)` returns `{"weights", "kv_cache", "total"}`
# in bytes for `batch` sequences of `tokens` tokens each.

# %% tags=["solution"]
def inference_memory(model: dict, batch: int, tokens: int, weight_bytes: float = 2, kv_bytes: float = 2) -> dict:
    """Bytes of the weights and of the KV cache (GQA, sliding window and latent attention included)."""
    ### BEGIN SOLUTION
    validate(model)
    weights = parameter_count(model)["total"] * weight_bytes
    if model["kv_rank"]:
        per_token = model["kv_rank"] + model["rope_dim"]
    else:
        per_token = 2 * model["kv_heads"] * model["head_dim"]
    cached = min(tokens, model["window"]) if model["window"] else tokens
    kv = batch * cached * model["layers"] * per_token * kv_bytes
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}
    ### END SOLUTION


# %% tags=["check"]
check("kv_cache")
### BEGIN HIDDEN TESTS
check("kv_cache", hidden=True)
### END HIDDEN TESTS

# %% tags=["check"]
check("inference_weights")
### BEGIN HIDDEN TESTS
check("inference_weights", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. GPT-3
#
# `GPT3_175B` above is Brown et al.'s largest model (2020, Table 2.1). The check compares your totals for it:
# training one sequence of 2048 tokens with and without full recomputation, and serving 32 sequences of 2048
# tokens in bf16 and int8.

# %% tags=["check"]
check("gpt3")
### BEGIN HIDDEN TESTS
check("gpt3", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Configurations that cannot exist
#
# Each function calls your `validate` first (section 1).

# %% tags=["check"]
check("invalid_configs")
### BEGIN HIDDEN TESTS
check("invalid_configs", hidden=True)
### END HIDDEN TESTS
