"""Checks: a model-memory calculator, against models the grader builds in torch on the meta device
(`aisys.meta_model`), activations measured with saved-tensor hooks on a small layer
(`aisys.parallel.toy_transformer`), and the reference (`aisys.model_memory`).

Counts and bytes are integers (halves with int4 weights), far below 2^53, so the comparisons are exact. Visible
cases are fixed; hidden ones add random configurations (GQA or not, tied or not, gated or not, biases, MoE). The
cases that decide each known-wrong answer (a tied GQA model, a gated MoE, a window shorter than the context, a
latent-attention model, flash with recomputation off) are among the fixed cases, which every run includes.
"""

import functools

from aisys import meta_model
from aisys import model_memory as reference
from aisys.parallel import toy_transformer

from aisys_grader.checks import check, compare_cases, raises_value_error
from aisys_grader.compare import CheckFailure, describe, shown, unredacted

DENSE = dict(layers=2, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=128, vocab=50, tied=False, gated=False,
             bias=False, norm="rmsnorm", positions=0, experts=0, top_k=0, shared_experts=0, expert_ffn=0,
             dense_layers=0, window=0, kv_rank=0, q_rank=0, rope_dim=0)


def model(**keys) -> dict:
    return dict(DENSE, **keys)


GQA_TIED = model(layers=3, heads=8, kv_heads=2, head_dim=8, ffn=176, vocab=101, tied=True, gated=True)
MQA_WIDE_HEADS = model(heads=4, kv_heads=1, head_dim=24, ffn=96)
GPT2_LIKE = model(hidden=48, heads=4, head_dim=12, ffn=192, vocab=77, tied=True, bias=True, norm="layernorm",
                  positions=32)
MLA = model(heads=4, head_dim=16, kv_rank=32, q_rank=24, rope_dim=8, gated=True)
MLA_NO_Q = model(heads=4, head_dim=16, kv_rank=32, rope_dim=8, bias=True, norm="layernorm")
MOE_SHARED = model(layers=4, hidden=32, heads=4, kv_heads=2, head_dim=8, ffn=64, vocab=40, tied=True, gated=True,
                   experts=6, top_k=2, shared_experts=1, expert_ffn=24, dense_layers=1)
MOE_PLAIN = model(hidden=32, heads=4, head_dim=8, ffn=64, vocab=40, experts=4, top_k=1, expert_ffn=16, bias=True)
WINDOW = model(layers=4, heads=8, kv_heads=2, head_dim=8, gated=True, window=16)
LLAMA_2_7B = model(layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128, ffn=11008, vocab=32000, gated=True)
LLAMA_3_70B = dict(LLAMA_2_7B, layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256)
MISTRAL_7B = dict(LLAMA_2_7B, kv_heads=8, ffn=14336, window=4096)
DEEPSEEK_V2 = model(layers=60, hidden=5120, heads=128, kv_heads=128, head_dim=128, ffn=12288, vocab=102400,
                    gated=True, experts=160, top_k=6, shared_experts=2, expert_ffn=1536, dense_layers=1, kv_rank=512,
                    q_rank=1536, rope_dim=64)
GPT3 = dict(LLAMA_2_7B, layers=96, hidden=12288, heads=96, kv_heads=96, head_dim=128, ffn=49152, vocab=50257,
            tied=True, gated=False, bias=True, norm="layernorm", positions=2048)


@functools.lru_cache(maxsize=None)
def _meta(items: tuple) -> dict:
    """The grader's own count: the model built in torch on the meta device (once per configuration)."""
    return meta_model.count(dict(items))


def meta_count(model: dict) -> dict:
    return _meta(tuple(model.items()))


def _random_dense(rng) -> dict:
    d = int(rng.choice([8, 16, 24]))
    kv = int(rng.choice([1, 2, 4]))
    heads = kv * int(rng.choice([1, 2, 3]))
    return model(layers=int(rng.integers(1, 4)), hidden=int(rng.choice([32, 48, 64])), heads=heads, kv_heads=kv,
                 head_dim=d, ffn=int(rng.integers(16, 200)), vocab=int(rng.integers(10, 300)),
                 tied=bool(rng.integers(2)), gated=bool(rng.integers(2)), bias=bool(rng.integers(2)),
                 norm=str(rng.choice(reference.NORMS)), positions=int(rng.choice([0, 16])),
                 window=int(rng.choice([0, 8])))


def _random_moe(rng) -> dict:
    experts = int(rng.integers(2, 9))
    layers = int(rng.integers(1, 4))
    return dict(_random_dense(rng), layers=layers, experts=experts, top_k=int(rng.integers(1, experts + 1)),
                shared_experts=int(rng.integers(0, 3)), expert_ffn=int(rng.integers(8, 64)),
                dense_layers=int(rng.integers(0, layers)))


def _compare_keys(keys, hint=None):
    """A comparison of the result's `keys`, exact (counts of parameters and bytes), naming the key that differs."""
    def compare(got, expected, case):
        if not isinstance(got, dict) or not set(keys) <= set(got):
            raise CheckFailure(f"expected a dict with keys {', '.join(keys)}, got {describe(got)}")
        for key in keys:
            value = got[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise CheckFailure(f"[{key!r}] must be a number, got {describe(value)}")
            # exact: integers (halves with int4 weights) far below 2^53 are exact in float64 whatever the order
            if value != expected[key]:
                why = hint(key, case, got, expected) if hint else ""
                raise CheckFailure(f"[{key!r}] is {shown(value)}, expected {shown(expected[key])}"
                                   + (f". {why}" if why else ""))
    return compare


# ----------------------------------------------------------------------------------------- parameters


def _parameter_hint(key, case, got, expected):
    m = case["model"]
    if m["tied"] and got[key] - expected[key] == m["vocab"] * m["hidden"]:
        return "a tied output head is the embedding's matrix: count it once"
    if m["gated"] and got[key] < expected[key]:
        return "a gated (SwiGLU) MLP has three matrices: gate and up (h x f each) and down (f x h)"
    if m["experts"] and key == "active":
        return "a token uses the router, the shared experts and top_k routed experts, not all of them"
    return ("count each matrix and bias of the conventions: K and V have kv_heads heads of head_dim, Q and the "
            "output heads of head_dim; norms h (RMSNorm) or 2h (LayerNorm)")


@check(points=2)
def dense_parameters(student, rng, hidden):
    """parameter_count of dense models (GQA, MQA, head_dim != h / a, tied, SwiGLU, biases, LayerNorm, learned
    positions, latent attention) equals the count of the same model built in torch on the meta device."""
    models = [GQA_TIED, MQA_WIDE_HEADS, GPT2_LIKE, MLA, MLA_NO_Q, LLAMA_2_7B, GPT3]
    if hidden:
        models += [_random_dense(rng) for _ in range(6)]
    compare_cases(student, "parameter_count", [{"model": m} for m in models], meta_count, returns="mapping",
                  hidden=hidden, compare=_compare_keys(("total", "active"), _parameter_hint))


@check(points=2)
def moe_parameters(student, rng, hidden):
    """parameter_count(...)["total"] of mixtures of experts (shared experts, dense first layers, plain or gated
    experts) equals the meta-device model's count of every parameter."""
    models = [MOE_SHARED, MOE_PLAIN]
    if hidden:
        models += [_random_moe(rng) for _ in range(5)]
    compare_cases(student, "parameter_count", [{"model": m} for m in models], meta_count, returns="mapping",
                  hidden=hidden, compare=_compare_keys(("total",), _parameter_hint))


@check(points=1)
def moe_active(student, rng, hidden):
    """parameter_count(...)["active"] of mixtures of experts leaves out the routed experts a token skips: the
    meta-device model's count less experts - top_k of each MoE layer's experts, counted module by module."""
    models = [MOE_SHARED, MOE_PLAIN]
    if hidden:
        models += [_random_moe(rng) for _ in range(5)]
    compare_cases(student, "parameter_count", [{"model": m} for m in models], meta_count, returns="mapping",
                  hidden=hidden, compare=_compare_keys(("active",), _parameter_hint))


@check(points=1)
def invalid_configs(student, rng, hidden):
    """heads not a multiple of kv_heads, and top_k above experts, raise ValueError naming the key, in each function."""
    bad = [("kv_heads", "heads must be a multiple of kv_heads", model(heads=6, kv_heads=4)),
           ("top_k", "a token cannot go through more experts than there are", dict(MOE_PLAIN, top_k=5))]
    if hidden:
        bad.append(("kv_heads", "heads must be a multiple of kv_heads", model(heads=8, kv_heads=3)))
    for naming, why, m in bad:
        raises_value_error(student, "parameter_count", why, naming=naming, model=m)
        raises_value_error(student, "training_memory", why, naming=naming, model=m, batch=1, seq=8)
        raises_value_error(student, "inference_memory", why, naming=naming, model=m, batch=1, tokens=8)


# ----------------------------------------------------------------------------------------- training


def _training_cases(rng, hidden) -> list[dict]:
    fixed = [(GQA_TIED, 2, 32, "none", False), (GQA_TIED, 2, 32, "none", True),
             (MOE_SHARED, 3, 16, "none", False), (MOE_PLAIN, 1, 8, "selective", False),
             (GPT2_LIKE, 4, 64, "full", False), (LLAMA_2_7B, 1, 4096, "none", True),
             (GPT3, 1, 2048, "selective", False)]
    cases = [dict(model=m, batch=b, seq=s, recompute=r, flash=f) for m, b, s, r, f in fixed]
    if hidden:
        for _ in range(6):
            m = _random_moe(rng) if rng.integers(2) else _random_dense(rng)
            cases.append(dict(model=m, batch=int(rng.integers(1, 5)), seq=int(rng.integers(1, 300)),
                              recompute=str(rng.choice(reference.RECOMPUTE)), flash=bool(rng.integers(2))))
    return cases


def _states_hint(key, case, got, expected):
    if key == "optimizer" and got[key] * 3 == expected[key] * 2:
        return ("mixed precision keeps an fp32 master copy of the weights besides Adam's two fp32 moments: "
                "4 + 4 + 4 = 12 bytes per parameter")
    return "2 bytes of weights, 2 of gradients, 12 of optimizer state per parameter, every expert included"


@check(points=2)
def model_states(student, rng, hidden):
    """training_memory's weights, gradients and optimizer: 2 + 2 + 12 bytes per parameter (mixed-precision Adam)."""
    compare_cases(student, "training_memory", _training_cases(rng, hidden), reference.training_memory,
                  returns="mapping", hidden=hidden,
                  compare=_compare_keys(("weights", "gradients", "optimizer"), _states_hint))


def _activation_hint(key, case, got, expected):
    if got[key] == 0:
        return "activations are memory too: often more than the weights at long sequences"
    if case["flash"] and case["recompute"] == "none" and got[key] > expected[key]:
        return "a fused (flash) attention keeps a 4-byte logsumexp per head and token instead of the s x s scores"
    return ("per token per layer: 10h + 4q + 4k + 4f (8f gated) + 5as (4a with flash, 0 selective), or 2h with full "
            "recomputation; f per token of an MoE layer is (top_k + shared_experts) expert_ffn")


@check(points=2)
def activations(student, rng, hidden):
    """training_memory's activations (and total): the per-token table for dense and MoE layers, flash, selective
    and full recomputation."""
    compare_cases(student, "training_memory", _training_cases(rng, hidden), reference.training_memory,
                  returns="mapping", hidden=hidden, compare=_compare_keys(("activations", "total"), _activation_hint))


@functools.lru_cache(maxsize=None)
def _measured(items: tuple, batch: int, seq: int, recompute: str) -> int:
    return toy_transformer.saved_activation_bytes(dict(items), batch, seq, recompute)


@check(points=2)
def measured_activations(student, rng, hidden):
    """One layer's activations are within 10% of the bytes its backward pass keeps, measured with saved-tensor hooks
    on a small bf16 layer (none, selective and full recomputation)."""
    cases = [(model(layers=1, heads=8, kv_heads=2, head_dim=8, ffn=176, gated=True), 2, 32),
             (model(layers=1, hidden=96, heads=4, head_dim=24, ffn=384), 1, 48)]
    if hidden:
        cases.append((model(layers=1, heads=4, kv_heads=1, head_dim=16, ffn=128, gated=bool(rng.integers(2))),
                      int(rng.integers(1, 4)), int(rng.choice([16, 48]))))
    for m, b, s in cases:
        planner_model = {key: m[key] for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "tied",
                                                 "gated")}
        for recompute in reference.RECOMPUTE:
            measured = _measured(tuple(planner_model.items()), b, s, recompute)
            got = student.call("training_memory", model=m, batch=b, seq=s, recompute=recompute, flash=False,
                               returns="mapping")
            value = got.get("activations") if isinstance(got, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise CheckFailure(f"training_memory(...)['activations'] must be a number, got {describe(value)}")
            # 10%: the table leaves out the norms' fp32 statistics (about 1% here); forgetting the scores or the
            # MLP's inner tensors is far more than 10% at these sizes (smaller slips are caught by `activations`)
            if abs(value - measured) > 0.10 * measured:
                where = unredacted(f" (batch={b}, seq={s}, model {m})")
                raise CheckFailure(
                    f"recompute={recompute!r}{where}: your activations are {shown(value)} B, measured "
                    f"{shown(measured)} B (saved-tensor hooks, unique storages): more than 10% apart")


# ----------------------------------------------------------------------------------------- inference


def _kv_hint(key, case, got, expected):
    m = case["model"]
    if m["kv_rank"]:
        return "latent attention caches the latent and the shared rotary key, kv_rank + rope_dim per token per layer"
    if m["window"] and case["tokens"] > m["window"]:
        return "a sliding window caches at most the last `window` tokens of each sequence"
    if m["kv_heads"] != m["heads"]:
        return "K and V are cached per key-value head: 2 kv_heads head_dim, not the query heads"
    return "2 (K and V) x kv_heads x head_dim x layers x tokens x batch x kv_bytes"


def _inference_cases(rng, hidden) -> list[dict]:
    fixed = [(LLAMA_2_7B, 1, 4096, 2, 2), (LLAMA_3_70B, 8, 8192, 2, 2), (GQA_TIED, 3, 100, 1, 1),
             (MISTRAL_7B, 2, 32768, 2, 2), (MISTRAL_7B, 2, 1000, 2, 1), (WINDOW, 2, 10, 2, 2),
             (WINDOW, 2, 40, 0.5, 2), (DEEPSEEK_V2, 4, 128000, 2, 2), (MLA, 1, 7, 2, 2), (MOE_SHARED, 2, 9, 0.5, 1),
             (GPT3, 32, 2048, 1, 2)]
    cases = [dict(model=m, batch=b, tokens=t, weight_bytes=w, kv_bytes=k) for m, b, t, w, k in fixed]
    if hidden:
        for _ in range(6):
            m = _random_moe(rng) if rng.integers(2) else _random_dense(rng)
            cases.append(dict(model=m, batch=int(rng.integers(1, 9)), tokens=int(rng.integers(1, 40)),
                              weight_bytes=float(rng.choice([0.5, 1, 2, 4])), kv_bytes=float(rng.choice([1, 2]))))
    return cases


@check(points=2)
def kv_cache(student, rng, hidden):
    """inference_memory's kv_cache: MHA, GQA, sliding windows shorter and longer than the context, latent
    attention (DeepSeek-V2's d_c + d_h^R), at 2 and 1 bytes per element."""
    compare_cases(student, "inference_memory", _inference_cases(rng, hidden), reference.inference_memory,
                  returns="mapping", hidden=hidden, compare=_compare_keys(("kv_cache",), _kv_hint))


@check(points=1)
def inference_weights(student, rng, hidden):
    """inference_memory's weights: every parameter (all experts resident) at 2, 1 or 0.5 bytes."""
    compare_cases(student, "inference_memory", _inference_cases(rng, hidden), reference.inference_memory,
                  returns="mapping", hidden=hidden, compare=_compare_keys(("weights",)))


@check(points=1)
def gpt3(student, rng, hidden):
    """GPT-3 175B: training one sequence of 2048 tokens (recomputation none and full) and serving 32 sequences of
    2048 tokens (bf16 and int8 weights, bf16 cache), totals against the reference."""
    training = [dict(model=GPT3, batch=1, seq=2048, recompute=r, flash=False) for r in ("none", "full")]
    compare_cases(student, "training_memory", training, reference.training_memory, returns="mapping",
                  hidden=hidden, compare=_compare_keys(("total",)))
    serving = [dict(model=GPT3, batch=32, tokens=2048, weight_bytes=w, kv_bytes=2) for w in (2, 1)]
    compare_cases(student, "inference_memory", serving, reference.inference_memory, returns="mapping",
                  hidden=hidden, compare=_compare_keys(("total",)))
