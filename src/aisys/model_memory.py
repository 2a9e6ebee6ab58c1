"""The memory of a decoder-only transformer: its parameters (total and active), what training keeps per GPU before
sharding (weights, gradients, optimizer state, activations) and what inference keeps (weights and the KV cache).

A model is a plain dict with every one of these keys (`config(...)` fills the defaults of a dense, Llama-like one):

    layers        L, the transformer layers
    hidden        h, the width of the residual stream
    heads         a, query heads
    kv_heads      key-value heads (grouped-query attention: a multiple of it is `heads`; `heads` for MHA, 1 for MQA)
    head_dim      d_h, the width of one head (h / a in most models, not all)
    ffn           the width of a dense layer's MLP
    vocab         V
    tied          the output head is the embedding matrix (counted once)
    gated         SwiGLU MLPs: gate and up (h x f each) and down (f x h), three matrices; else up and down, two
    bias          every linear layer has a bias, except the output head and the MoE router
    norm          "rmsnorm" (a weight of h) or "layernorm" (a weight and a bias of h): two per layer, one final
    positions     rows of a learned position embedding (0: rotary or none)
    experts       routed experts of each MoE layer (0: a dense model)
    top_k         routed experts each token goes through
    shared_experts  experts every token goes through besides (DeepSeekMoE)
    expert_ffn    the width of one expert's MLP (gated as `gated`)
    dense_layers  the first layers keep a dense MLP of `ffn` (DeepSeek-V2: 1); the others are MoE layers
    window        sliding-window attention: a token attends to the last `window` tokens (0: the whole context)
    kv_rank       d_c, multi-head latent attention's compressed key-value width (0: standard attention)
    q_rank        d_c', MLA's compressed query width (0: queries projected directly)
    rope_dim      d_h^R, MLA's decoupled rotary key and query width per head

Standard attention: Q (h x a d_h), K and V (h x kv_heads d_h each), output (a d_h x h). Multi-head latent
attention (DeepSeek-AI, "DeepSeek-V2", 2024, section 2.1), laid out as its public implementation: the queries
h x d_c' (a norm of d_c') then d_c' x a (d_h + d_h^R), or h x a (d_h + d_h^R) when q_rank is 0; keys and values
h x (d_c + d_h^R) (the latent and the rotary key shared by all heads), a norm of d_c, d_c x a (d_h + d_h), and the
output a d_h x h; `kv_heads` must equal `heads`. An MoE layer has a router h x experts (no bias), `experts` routed
and `shared_experts` shared MLPs of `expert_ffn`. Around the layers: the embedding V x h, the position embedding
positions x h, a final norm, and the output head h x V unless tied.

Active parameters are those one token's forward pass reads: all but the routed experts it is not sent to
(embedding and head counted whole, as Mixtral's and DeepSeek-V2's reported active counts do).

Training (`training_memory`) follows mixed precision with Adam: 2 bytes of bf16 weights, 2 of gradients, and 12 of
optimizer state (fp32 master weights, momentum, variance) per parameter, 16 in all (Rajbhandari et al., "ZeRO",
SC 2020, section 3.1; `aisys.mixed_precision`). Activations are Korthikanti et al.'s ("Reducing Activation
Recomputation in Large Transformer Models", MLSys 2023, section 4.1) tensor by tensor, generalised to any head
width, grouped-query attention and MoE (`activation_terms`). Inference (`inference_memory`) is the weights at a
chosen width and the KV cache; its activations (a few tokens' worth) are left out.
"""

from ._validate import nonnegative_int, one_of, positive_int, positive_number
from .mixed_precision import ADAM_MIXED_PRECISION_STATES
from .dtypes import bytes_per_element

KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "tied", "gated", "bias", "norm",
        "positions", "experts", "top_k", "shared_experts", "expert_ffn", "dense_layers", "window", "kv_rank",
        "q_rank", "rope_dim")
NORMS = ("rmsnorm", "layernorm")
RECOMPUTE = ("none", "selective", "full")
# Mixed precision with Adam, bytes per parameter: (weights, gradients, optimizer) = (2, 2, 4 + 4 + 4).
WEIGHT_BYTES, GRADIENT_BYTES = (int(bytes_per_element(dtype)) for _, dtype in ADAM_MIXED_PRECISION_STATES[:2])
OPTIMIZER_BYTES = int(sum(bytes_per_element(dtype) for _, dtype in ADAM_MIXED_PRECISION_STATES[2:]))
ACTIVATION_BYTES, MASK_BYTES, LOGSUMEXP_BYTES = 2, 1, 4  # bf16 activations, bool dropout masks, fp32 statistics


# ----------------------------------------------------------------------------------------- configs


def config(**keys) -> dict:
    """A model dict: a dense model with multi-head attention (kv_heads = heads), head_dim = hidden / heads, RMSNorm,
    no biases, rotary positions, untied, SwiGLU; any key given replaces its default."""
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown model key(s) {', '.join(sorted(unknown))}; the keys are {', '.join(KEYS)}")
    for key in ("layers", "hidden", "heads", "ffn", "vocab"):
        if key not in keys:
            raise ValueError(f"config needs '{key}'")
    model = {"kv_heads": keys["heads"], "head_dim": keys["hidden"] // keys["heads"], "tied": False, "gated": True,
             "bias": False, "norm": "rmsnorm", "positions": 0, "experts": 0, "top_k": 0, "shared_experts": 0,
             "expert_ffn": 0, "dense_layers": 0, "window": 0, "kv_rank": 0, "q_rank": 0, "rope_dim": 0, **keys}
    return validate({key: model[key] for key in KEYS})


def from_planner(model: dict) -> dict:
    """The model_memory dict of an `aisys.parallel.planner` model (its keys, norms with a weight only)."""
    return config(**{key: model[key] for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "tied",
                                                 "gated")})


def validate(model: dict) -> dict:
    """The model, checked: a ValueError names the key that is wrong and says what was expected."""
    if not isinstance(model, dict):
        raise ValueError(f"model must be a dict with keys {', '.join(KEYS)}; got {type(model).__name__}")
    missing, extra = set(KEYS) - set(model), set(model) - set(KEYS)
    if missing or extra:
        raise ValueError(f"model must have exactly the keys {', '.join(KEYS)}; missing {sorted(missing)}, "
                         f"unknown {sorted(extra)}")
    m = dict(model)
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
        positive_int(f"model['{key}']", m[key])
    for key in ("positions", "experts", "top_k", "shared_experts", "expert_ffn", "dense_layers", "window", "kv_rank",
                "q_rank", "rope_dim"):
        nonnegative_int(f"model['{key}']", m[key])
    for key in ("tied", "gated", "bias"):
        if not isinstance(m[key], bool):
            raise ValueError(f"model['{key}'] must be True or False, got {m[key]!r}")
    one_of("model['norm']", m["norm"], NORMS)
    if m["heads"] % m["kv_heads"]:
        raise ValueError(f"model['heads'] ({m['heads']}) must be a multiple of model['kv_heads'] ({m['kv_heads']})")
    if m["experts"]:
        if not 1 <= m["top_k"] <= m["experts"]:
            raise ValueError(f"model['top_k'] ({m['top_k']}) must be between 1 and model['experts'] ({m['experts']})")
        if not m["expert_ffn"]:
            raise ValueError("model['expert_ffn'] must be positive in a mixture of experts")
        if m["dense_layers"] > m["layers"]:
            raise ValueError(f"model['dense_layers'] ({m['dense_layers']}) must be at most model['layers'] "
                             f"({m['layers']})")
    elif m["top_k"] or m["shared_experts"] or m["expert_ffn"] or m["dense_layers"]:
        raise ValueError("model['top_k'], ['shared_experts'], ['expert_ffn'] and ['dense_layers'] must be 0 when "
                         "model['experts'] is 0 (a dense model)")
    if m["kv_rank"]:
        if m["kv_heads"] != m["heads"]:
            raise ValueError(f"model['kv_heads'] ({m['kv_heads']}) must equal model['heads'] ({m['heads']}) with "
                             "latent attention (model['kv_rank'] > 0): every head has its own up-projected K and V")
    elif m["q_rank"] or m["rope_dim"]:
        raise ValueError("model['q_rank'] and model['rope_dim'] must be 0 without latent attention "
                         "(model['kv_rank'] = 0)")
    return m


# ----------------------------------------------------------------------------------------- parameters


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def _norm(width: int, model: dict) -> int:
    return width * (2 if model["norm"] == "layernorm" else 1)


def _mlp(model: dict, width: int) -> int:
    h, bias = model["hidden"], model["bias"]
    return (2 if model["gated"] else 1) * _linear(h, width, bias) + _linear(width, h, bias)


def attention_parameters(model: dict) -> int:
    """Parameters of one layer's attention (its norm excluded)."""
    m = validate(model)
    h, a, d, bias = m["hidden"], m["heads"], m["head_dim"], m["bias"]
    if not m["kv_rank"]:
        return _linear(h, a * d, bias) + 2 * _linear(h, m["kv_heads"] * d, bias) + _linear(a * d, h, bias)
    rope, c, cq = m["rope_dim"], m["kv_rank"], m["q_rank"]
    query = (_linear(h, cq, bias) + _norm(cq, m) + _linear(cq, a * (d + rope), bias)) if cq \
        else _linear(h, a * (d + rope), bias)
    key_value = _linear(h, c + rope, bias) + _norm(c, m) + _linear(c, a * 2 * d, bias)
    return query + key_value + _linear(a * d, h, bias)


def layer_parameters(model: dict, moe: bool) -> dict:
    """One layer's parameters: {"attention", "mlp" (all of an MoE layer's experts), "active_mlp" (router, shared
    experts and top_k routed ones), "norms"}; `moe` picks an MoE layer or a dense one."""
    m = validate(model)
    if moe and not m["experts"]:
        raise ValueError("moe=True needs a model with model['experts'] > 0")
    if moe:
        expert = _mlp(m, m["expert_ffn"])
        router = m["hidden"] * m["experts"]
        mlp = router + (m["shared_experts"] + m["experts"]) * expert
        active = router + (m["shared_experts"] + m["top_k"]) * expert
    else:
        mlp = active = _mlp(m, m["ffn"])
    return {"attention": attention_parameters(m), "mlp": mlp, "active_mlp": active, "norms": 2 * _norm(m["hidden"], m)}


def moe_layers(model: dict) -> int:
    """Layers with a mixture of experts: all but the first `dense_layers` in an MoE model, none in a dense one."""
    m = validate(model)
    return m["layers"] - m["dense_layers"] if m["experts"] else 0


def parameter_count(model: dict) -> dict:
    """{"total": every parameter, "active": those one token's forward pass uses}."""
    m = validate(model)
    h = m["hidden"]
    outside = (m["vocab"] + m["positions"]) * h + _norm(h, m) + (0 if m["tied"] else m["vocab"] * h)
    total, active = outside, outside
    for moe, count in ((False, m["layers"] - moe_layers(m)), (True, moe_layers(m))):
        if count:
            layer = layer_parameters(m, moe)
            total += count * (layer["attention"] + layer["mlp"] + layer["norms"])
            active += count * (layer["attention"] + layer["active_mlp"] + layer["norms"])
    return {"total": total, "active": active}


# ----------------------------------------------------------------------------------------- training


def activation_terms(model: dict, moe: bool = False) -> dict:
    """Bytes one token keeps in one layer for the backward pass, by Korthikanti et al.'s groups (section 4.1,
    2-byte activations, 1-byte dropout masks), with q = a d_h, k = kv_heads d_h and f the MLP's width per token:

      "replicated" 10h: the two norms' inputs (4h), the attention's and the MLP's inputs (4h), two dropout masks
                   (2h); what tensor parallelism leaves whole;
      "split"      4q + 4k + F: Q (2q), K and V (4k), the output projection's input (2q), and the MLP's inner
                   tensors F = 4f (the activation's input and the down projection's) or 8f gated (gate, up,
                   SiLU(gate), their product); f is ffn, or (top_k + shared_experts) expert_ffn in an MoE layer
                   (each token's inputs to its experts are counted once, the router's scores left out);
      "scores"     5a per token of context (multiply by s): the softmax output (2), its dropout mask (1) and the
                   dropout's output (2) for each of the a heads;
      "logsumexp"  4a: what a fused (flash) attention keeps instead of the scores, one fp32 per head and row.

    With d_h = h / a, k = q = h and f = 4h, replicated + split + scores s is the paper's h (34 + 5as/h)."""
    m = validate(model)
    if m["kv_rank"]:
        raise ValueError("model['kv_rank'] > 0: the activations of latent attention are not modelled here")
    h, a = m["hidden"], m["heads"]
    q, k = a * m["head_dim"], m["kv_heads"] * m["head_dim"]
    f = (m["top_k"] + m["shared_experts"]) * m["expert_ffn"] if moe else m["ffn"]
    return {"replicated": 2 * (2 * ACTIVATION_BYTES * h) + MASK_BYTES * 2 * h,
            "split": ACTIVATION_BYTES * (2 * q + 2 * k) + (8 if m["gated"] else 4) * f,
            "scores": (2 * ACTIVATION_BYTES + MASK_BYTES) * a,
            "logsumexp": LOGSUMEXP_BYTES * a}


def activation_bytes_per_token(model: dict, seq: int, recompute: str = "none", flash: bool = False,
                               moe: bool = False) -> int:
    """Bytes one token keeps in one layer for a sequence of `seq` tokens.

    "none": every term; the attention scores grow with the context (5 a s), or are the fused attention's
    logsumexp (4a) when `flash`. "selective": the attention core is recomputed, no score term. "full": only the
    layer's input, 2h bytes, is kept (the layer's forward pass runs again in the backward pass).
    Sliding-window attention is counted as full attention (the scores of a banded kernel are not modelled)."""
    m = validate(model)
    seq = positive_int("seq", seq)
    one_of("recompute", recompute, RECOMPUTE)
    if not isinstance(flash, bool):
        raise ValueError(f"flash must be True or False, got {flash!r}")
    if recompute == "full":
        return ACTIVATION_BYTES * m["hidden"]
    terms = activation_terms(m, moe)
    kept = terms["replicated"] + terms["split"]
    if recompute == "none":
        kept += terms["logsumexp"] if flash else terms["scores"] * seq
    return kept


def activation_bytes(model: dict, batch: int, seq: int, recompute: str = "none", flash: bool = False) -> int:
    """Bytes of activations a training step keeps at its peak (the end of the forward pass) for `batch` sequences of
    `seq` tokens: every layer's, dense and MoE; the embedding, final norm, logits and loss are left out."""
    m = validate(model)
    tokens = positive_int("batch", batch) * positive_int("seq", seq)
    moe = moe_layers(m)
    per_token = (m["layers"] - moe) * activation_bytes_per_token(m, seq, recompute, flash)
    if moe:
        per_token += moe * activation_bytes_per_token(m, seq, recompute, flash, moe=True)
    return tokens * per_token


def training_memory(model: dict, batch: int, seq: int, recompute: str = "none", flash: bool = False) -> dict:
    """Bytes of one training step on one device, nothing sharded: {"weights", "gradients", "optimizer",
    "activations", "total"}, mixed precision with Adam (2 + 2 + 12 bytes per parameter, all experts included)."""
    n = parameter_count(model)["total"]
    memory = {"weights": WEIGHT_BYTES * n, "gradients": GRADIENT_BYTES * n, "optimizer": OPTIMIZER_BYTES * n,
              "activations": activation_bytes(model, batch, seq, recompute, flash)}
    memory["total"] = sum(memory.values())
    return memory


# ----------------------------------------------------------------------------------------- inference


def kv_elements_per_token(model: dict) -> int:
    """Elements one token adds to the cache of one layer: K and V of each kv head (2 kv_heads d_h), or with latent
    attention the latent and the shared rotary key (d_c + d_h^R: DeepSeek-V2, section 2.1.2)."""
    m = validate(model)
    return m["kv_rank"] + m["rope_dim"] if m["kv_rank"] else 2 * m["kv_heads"] * m["head_dim"]


def cached_tokens(model: dict, tokens: int) -> int:
    """Tokens a layer's cache holds for a sequence of `tokens`: all of them, or the last `window` (a rolling
    buffer, Mistral 7B's)."""
    m = validate(model)
    tokens = nonnegative_int("tokens", tokens)
    return min(tokens, m["window"]) if m["window"] else tokens


def kv_cache_bytes(model: dict, batch: int, tokens: int, kv_bytes: float = 2) -> float:
    """Bytes of the KV cache of `batch` sequences of `tokens` tokens, `kv_bytes` bytes per element."""
    m = validate(model)
    return (positive_int("batch", batch) * cached_tokens(m, tokens) * m["layers"] * kv_elements_per_token(m)
            * positive_number("kv_bytes", kv_bytes))


def inference_memory(model: dict, batch: int, tokens: int, weight_bytes: float = 2, kv_bytes: float = 2) -> dict:
    """Bytes to serve `batch` sequences of `tokens` tokens: {"weights" (every parameter, all experts resident, at
    `weight_bytes` each: 2 bf16, 1 int8, 0.5 int4), "kv_cache", "total"}."""
    weights = parameter_count(model)["total"] * positive_number("weight_bytes", weight_bytes)
    kv = kv_cache_bytes(model, batch, tokens, kv_bytes)
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}


# ----------------------------------------------------------------------------------------- published configurations

# Brown et al., "Language Models are Few-Shot Learners" (2020), Table 2.1: 96 layers, d_model 12288, 96 heads of 128,
# context 2048; GPT-2's layout (section 2.1): LayerNorm, biases, learned positions, the 50257-token vocabulary,
# d_ff = 4 d_model. A tied head, as GPT-2's: the paper does not say (an assumption).
GPT3_175B = config(layers=96, hidden=12288, heads=96, ffn=4 * 12288, vocab=50257, tied=True, gated=False, bias=True,
                   norm="layernorm", positions=2048)
# config.json on the Hugging Face Hub (the shapes of aisys.inference.model).
LLAMA_2_7B = config(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000)
LLAMA_2_70B = config(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000)
LLAMA_3_8B = config(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256)
# Jiang et al., "Mistral 7B" (2023), Table 1 (window 4096); Mixtral 8x7B and DeepSeek-V2 typed from memory of their
# config.json, not checked here: their totals agree with the published 46.7B / 12.9B and 236B / 21B (tests).
MISTRAL_7B = config(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, window=4096)
MIXTRAL_8X7B = config(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, experts=8, top_k=2,
                      expert_ffn=14336)
DEEPSEEK_V2 = config(layers=60, hidden=5120, heads=128, head_dim=128, ffn=12288, vocab=102400, experts=160, top_k=6,
                     shared_experts=2, expert_ffn=1536, dense_layers=1, kv_rank=512, q_rank=1536, rope_dim=64)
MODELS = {"GPT-3 175B": GPT3_175B, "Llama-2-7B": LLAMA_2_7B, "Llama-2-70B": LLAMA_2_70B, "Llama-3-8B": LLAMA_3_8B,
          "Mistral 7B": MISTRAL_7B, "Mixtral 8x7B": MIXTRAL_8X7B, "DeepSeek-V2": DEEPSEEK_V2}
