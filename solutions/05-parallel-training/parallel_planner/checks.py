"""Checks: the memory and time planner, against the reference (`aisys.parallel.planner`), a model built on torch's
meta device, and activations measured on a small layer on the CPU.

Bytes are integers and compared exactly. Times are the same float arithmetic done in another order, so they are
compared to a relative 1e-9 (rounding only; any wrong term is off by far more). Each check's visible cases are
fixed; hidden ones add random models (grouped-query or not, tied or not, gated or not) and random valid layouts.
The cases that decide each known-wrong answer (ZeRO with d > 1, sequence parallelism with t > 1, m > p in a
pipeline, TP across nodes) are among the fixed cases, which run in both the visible and the hidden check.
"""

import functools

import aisys.parallel.planner as planner
from aisys.parallel import toy_transformer

from aisys_grader.checks import check, compare_cases, raises_value_error
from aisys_grader.compare import CheckFailure, describe, raised, shown, unredacted

CLUSTER = planner.cluster()  # H100 SXM, 8 per node, NVLink 4 inside a node, one InfiniBand NDR port per GPU

GPT3 = {"layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 49152, "vocab": 50257, "tied": True,
        "gated": False}
LLAMA70 = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 128256,
           "tied": False, "gated": True}
SMALL_GQA = {"layers": 4, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn": 176, "vocab": 101, "tied": True,
             "gated": True}
SMALL_MHA = {"layers": 6, "hidden": 96, "heads": 4, "kv_heads": 4, "ffn": 384, "vocab": 1000, "tied": False,
             "gated": False}
# 29 B parameters, 25 heads (no TP beyond 1 on 8 GPUs), 67 layers (a prime: no PP): only ZeRO-3 fits 8 GPUs.
ONLY_ZERO3 = {"layers": 67, "hidden": 6400, "heads": 25, "kv_heads": 5, "ffn": 17280, "vocab": 32000,
              "tied": False, "gated": True}
# 65 B, multi-head: on 16 GPUs (two nodes), TP 16 would be fastest at NVLink speed; across InfiniBand it loses.
MHA65 = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 64, "ffn": 32768, "vocab": 50304, "tied": False,
         "gated": False}


@functools.lru_cache(maxsize=None)
def _measured(model_items: tuple, micro_batch: int, seq: int, recompute: str) -> int:
    """A layer's saved activations, measured once per case in this process (a pure function of its arguments)."""
    return toy_transformer.saved_activation_bytes(dict(model_items), micro_batch, seq, recompute)


@functools.lru_cache(maxsize=None)
def _meta_count(model_items: tuple) -> int:
    return toy_transformer.meta_parameter_count(dict(model_items))


def layout(d, t, p, zero=0, recompute="none", sp=False):
    return {"dp": d, "tp": t, "pp": p, "zero": zero, "recompute": recompute, "sequence_parallel": sp}


def _random_model(rng) -> dict:
    hs = int(rng.choice([16, 32, 64, 128]))
    kv = int(rng.choice([1, 2, 4, 8]))
    heads = kv * int(rng.choice([1, 2, 4]))
    h = heads * hs
    return {"layers": int(rng.choice([2, 4, 6, 8, 12, 16])), "hidden": h, "heads": heads, "kv_heads": kv,
            "ffn": int(rng.choice([2, 4, 8])) * h // 2 * 2, "vocab": int(rng.integers(50, 70000)),
            "tied": bool(rng.integers(2)), "gated": bool(rng.integers(2))}


def _random_layout(rng, model) -> tuple[dict, int]:
    ts = [t for t in (1, 2, 4, 8) if not any(model[k] % t for k in ("heads", "kv_heads", "ffn"))]
    ps = [p for p in (1, 2, 4) if model["layers"] % p == 0]
    t, p, d = int(rng.choice(ts)), int(rng.choice(ps)), int(rng.choice([1, 2, 3, 4, 8]))
    return layout(d, t, p, int(rng.integers(4)), str(rng.choice(planner.RECOMPUTE)), bool(t > 1 and rng.integers(2))), \
        d * t * p


# ----------------------------------------------------------------------------------------- parameters


@check(points=1)
def parameter_count(student, rng, hidden):
    """parameter_count(model) equals the parameters of the model built in torch on the meta device."""
    models = [GPT3, LLAMA70, SMALL_GQA, SMALL_MHA]
    if hidden:
        models += [_random_model(rng) for _ in range(8)]

    def hint(case, got, expected):
        model = case["model"]
        if model["tied"] and got == expected + model["vocab"] * model["hidden"]:
            return "A tied output head is the embedding's matrix: count it once."
        if model["kv_heads"] != model["heads"]:
            return "K and V have kv_heads heads each (grouped-query attention), Q and the output projection heads."
        return "Count each matrix of the conventions; norms have a weight of `hidden` and no bias."

    compare_cases(student, "parameter_count", [{"model": model} for model in models],
                  lambda model: _meta_count(tuple(model.items())), returns="integer", hidden=hidden,
                  tolerance=(0, 0), hint=hint)


# ----------------------------------------------------------------------------------------- memory


def _memory_cases(rng, hidden) -> list[dict]:
    fixed = [(GPT3, layout(1, 1, 1), 1, 1, 2048, 1),
             (GPT3, layout(8, 8, 16, 0, "selective", True), 1024, 1, 2048, 16),
             (LLAMA70, layout(4, 8, 2, 1, "none", False), 64, 1, 4096, 8),
             (LLAMA70, layout(16, 8, 1, 2, "full", True), 128, 2, 4096, 4),
             (SMALL_GQA, layout(3, 2, 2, 3, "none", True), 12, 2, 32, 5),
             (SMALL_MHA, layout(2, 4, 3, 3, "selective", False), 24, 1, 64, 2),
             (SMALL_MHA, layout(5, 1, 6, 2, "none", False), 30, 3, 16, 9),
             (ONLY_ZERO3, layout(8, 1, 1, 3, "full", False), 8, 1, 2048, 8)]
    cases = [dict(model=model, layout=lay, gpus=gpus, micro_batch=b, seq=s, micro_batches=m)
             for model, lay, gpus, b, s, m in fixed]
    if hidden:
        for _ in range(16):
            model = _random_model(rng)
            lay, gpus = _random_layout(rng, model)
            cases.append(dict(model=model, layout=lay, gpus=gpus, micro_batch=int(rng.integers(1, 5)),
                              seq=int(rng.choice([16, 128, 1024, 4096])), micro_batches=int(rng.integers(1, 9))))
    return cases


def _compare_terms(keys, hints):
    """A comparison of the result's `keys` (exact for integers, 1e-9 relative for floats), naming the term."""
    def compare(got, expected, case):
        if not isinstance(got, dict) or not set(keys) <= set(got):
            raise CheckFailure(f"expected a dict with keys {', '.join(keys)}, got {describe(got)}")
        for key in keys:
            value = got[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CheckFailure(f"[{key!r}] must be a number, got {describe(value)}")
            exact = isinstance(expected[key], int)
            if (value != expected[key]) if exact else abs(value - expected[key]) > 1e-9 * abs(expected[key]):
                why = hints(key, case, got, expected)
                raise CheckFailure(f"[{key!r}] is {shown(value)}, expected {shown(expected[key])}"
                                   + (f". {why}" if why else ""))
    return compare


def _state_hint(key, case, got, expected):
    lay = case["layout"]
    if key in ("gradients", "optimizer") and got[key] == 0:
        return ("mixed precision with Adam keeps 2 bytes of gradients and 12 of optimizer state (master weights, "
                "momentum, variance) per parameter, besides the 2 of the weights: 16 in all")
    if lay["dp"] > 1 and lay["zero"]:
        sharded = ", ".join(["the optimizer state", "the gradients", "the weights"][:lay["zero"]])
        return f"ZeRO stage {lay['zero']} shards {sharded} over the dp replicas, ceil(n / dp) parameters each"
    return "count the first stage's parameters: its layers' matrices / tp, norms replicated, ceil(V/tp) embedding rows"


@check(points=2)
def model_states(student, rng, hidden):
    """memory_per_gpu's parameters, gradients and optimizer bytes: 2 + 2 + 12 per parameter, sharded by ZeRO."""
    cases = _memory_cases(rng, hidden)
    compare_cases(student, "memory_per_gpu", cases, planner.memory_per_gpu, returns="mapping", hidden=hidden,
                  compare=_compare_terms(("parameters", "gradients", "optimizer"), _state_hint))


def _activation_hint(key, case, got, expected):
    lay = case["layout"]
    if lay["zero"] and lay["dp"] > 1 and got[key] < expected[key]:
        return "ZeRO shards model states over the replicas; each replica's activations are its own, whole"
    if lay["sequence_parallel"] and lay["tp"] > 1 and got[key] > expected[key]:
        return ("with sequence parallelism the replicated 10sbh (norm and block inputs, dropout masks) is split "
                "along the sequence too: every term is divided by tp")
    if lay["pp"] > 1 and case["micro_batches"] > lay["pp"] and got[key] > expected[key]:
        return "under 1F1B the first stage holds at most pp micro-batches at once, not all of them"
    return "per layer: Korthikanti et al.'s table, for this layout; times layers / pp, times min(m, pp)"


@check(points=3)
def activations(student, rng, hidden):
    """memory_per_gpu's activations: the per-layer formula for TP, SP and recomputation, times L/p, times min(m, p)."""
    cases = _memory_cases(rng, hidden)
    compare_cases(student, "memory_per_gpu", cases, planner.memory_per_gpu, returns="mapping", hidden=hidden,
                  compare=_compare_terms(("activations", "total"), _activation_hint))


@check(points=2)
def measured_activations(student, rng, hidden):
    """Activations of one layer on one GPU are within 10% of what a small layer's backward pass keeps, measured."""
    cases = [(SMALL_GQA, 2, 32), (SMALL_MHA, 2, 32)]
    if hidden:
        cases.append(({"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 1, "ffn": 128, "vocab": 10, "tied": True,
                       "gated": bool(rng.integers(2))}, int(rng.integers(1, 4)), int(rng.choice([16, 48]))))
    for model, b, s in cases:
        model = dict(model, layers=1)
        for recompute in planner.RECOMPUTE:
            measured = _measured(tuple(model.items()), b, s, recompute)
            got = student.call("memory_per_gpu", model=model, layout=layout(1, 1, 1, 0, recompute), gpus=1,
                               micro_batch=b, seq=s, micro_batches=1, returns="mapping")
            value = got.get("activations") if isinstance(got, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CheckFailure(f"memory_per_gpu(...)['activations'] must be a number, got {describe(value)}")
            # 10%: the formula leaves out only the norms' statistics (under 1% here). The scores' and the MLP's
            # terms are well over 10% at these sizes and fail here; smaller ones (Q alone, a dropout mask: 2-5%)
            # are caught by the exact comparison with the reference in `activations`.
            if abs(value - measured) > 0.10 * measured:
                where = unredacted(f" (b={b}, s={s}, model {model})")
                raise CheckFailure(
                    f"recompute={recompute!r}{where}: your activations are {shown(value)} B, measured "
                    f"{shown(measured)} B (saved-tensor hooks, unique storages): more than 10% apart. "
                    "Compare term by term with the table: Q, K, V (kv_heads), softmax output, dropout mask "
                    "and output (5as^2b), the MLP's inner tensors (4sbf, gated 8sbf)")


# ----------------------------------------------------------------------------------------- errors


@check(points=1)
def invalid_layouts(student, rng, hidden):
    """dp * tp * pp != gpus, and heads, kv_heads, ffn not divisible by tp or layers by pp, raise a ValueError naming
    what is wrong, in memory_per_gpu and in step_time."""
    batch = {"micro_batch": 1, "seq": 128, "micro_batches": 4}
    bad = [("gpus", "dp * tp * pp must equal gpus", SMALL_MHA, layout(2, 2, 2), 16),
           ("heads", "tp must divide the heads", dict(SMALL_MHA, heads=6, kv_heads=6), layout(1, 4, 1), 4),
           ("kv_heads", "tp must divide the kv heads", SMALL_GQA, layout(1, 4, 1), 4),
           ("layers", "pp must divide the layers", SMALL_GQA, layout(1, 1, 3), 3)]
    if hidden:
        bad.append(("ffn", "tp must divide the MLP's width", dict(SMALL_MHA, ffn=390), layout(2, 4, 1), 8))
    for naming, why, model, lay, gpus in bad:
        raises_value_error(student, "memory_per_gpu", why, naming=naming, model=model, layout=lay, gpus=gpus, **batch)
        raises_value_error(student, "step_time", why, naming=naming, model=model, layout=lay, gpus=gpus, **batch,
                            cluster=CLUSTER, utilisation=0.5)


# ----------------------------------------------------------------------------------------- time


def _time_hint(key, case, got, expected):
    lay = case["layout"]
    if key == "bubble_fraction" or (key == "bubble" and lay["pp"] > 1):
        return ("the bubble is (p-1)/(m+p-1) of compute + bubble: (p-1) micro-batch slots of idle time against m "
                "of work, so bubble = compute (p-1)/m")
    if key == "tp" and not planner.within_node(1, lay["tp"], CLUSTER["gpus_per_node"]):
        return "a TP group larger than a node communicates at the inter-node link's speed"
    if key == "tp":
        return "4 ring all-reduces (6 with full recomputation) of 2 b s h bytes per layer of the stage per micro-batch"
    if key in ("dp", "dp_exposed"):
        return ("a ring all-reduce of the stage's 2-byte gradients over dp (x1.5 for ZeRO-3), overlapping the last "
                "micro-batch's backward")
    return ""


def _time_cases(rng, hidden) -> list[dict]:
    fixed = [(GPT3, layout(8, 8, 16, 1, "selective", True), 1024, 1, 2048, 192),
             (GPT3, layout(1, 16, 8, 0, "selective", True), 128, 1, 2048, 24),  # TP across two nodes
             (LLAMA70, layout(16, 8, 1, 3, "full", True), 128, 2, 4096, 4),
             (LLAMA70, layout(4, 8, 2, 2, "none", False), 64, 1, 4096, 1),  # fewer micro-batches than stages
             (SMALL_GQA, layout(4, 2, 2, 0, "none", True), 16, 2, 32, 5),
             (ONLY_ZERO3, layout(8, 1, 1, 3, "full", False), 8, 1, 2048, 8)]
    cases = [dict(model=model, layout=lay, gpus=gpus, micro_batch=b, seq=s, micro_batches=m, cluster=CLUSTER,
                  utilisation=0.5) for model, lay, gpus, b, s, m in fixed]
    if hidden:
        for case in _memory_cases(rng, hidden)[-12:]:
            cluster = dict(CLUSTER, gpus_per_node=int(rng.choice([2, 4, 8])))
            cases.append(dict(case, cluster=cluster, utilisation=float(rng.uniform(0.3, 0.7))))
    return cases


@check(points=3)
def step_time(student, rng, hidden):
    """step_time's terms: 6ND (8ND) compute, bubble, TP all-reduces on the right link, PP messages, DP overlap."""
    keys = ("compute", "bubble", "tp", "pp", "dp", "dp_exposed", "bubble_fraction", "total")
    compare_cases(student, "step_time", _time_cases(rng, hidden), planner.step_time, returns="mapping",
                  hidden=hidden, compare=_compare_terms(keys, _time_hint))


# ----------------------------------------------------------------------------------------- search


def _best_cases(rng, hidden) -> list[tuple[str, dict]]:
    small = dict(CLUSTER, memory=3e6)  # a small model on small GPUs, so that the memory decides
    cases = [("GPT-3 175B on 1024 H100s", dict(model=GPT3, gpus=1024, global_batch=1536, micro_batch=1, seq=2048)),
             ("only ZeRO-3 fits", dict(model=ONLY_ZERO3, gpus=8, global_batch=64, micro_batch=1, seq=2048)),
             ("TP across nodes loses", dict(model=MHA65, gpus=16, global_batch=1, micro_batch=1, seq=4096)),
             ("a 70B on 64 GPUs", dict(model=LLAMA70, gpus=64, global_batch=64, micro_batch=1, seq=4096)),
             ("nothing fits", dict(model=GPT3, gpus=8, global_batch=8, micro_batch=1, seq=2048)),
             ("a small model", dict(model=SMALL_MHA, gpus=12, global_batch=24, micro_batch=2, seq=64, cluster=small))]
    if hidden:
        for i in range(3):
            model = _random_model(rng)
            gpus = int(rng.choice([4, 8, 16]))
            b = int(rng.integers(1, 3))
            batch = dict(model=model, gpus=gpus, global_batch=gpus * b * int(rng.integers(1, 5)), micro_batch=b,
                         seq=int(rng.choice([512, 4096])))
            # GPUs with half the memory that plain data parallelism needs: something must be sharded
            plain = planner.memory_per_gpu(model, layout(gpus, 1, 1), gpus, batch["micro_batch"], batch["seq"],
                                           batch["global_batch"] // (gpus * batch["micro_batch"]))["total"]
            cases.append((f"random {i + 1}", dict(batch, cluster=dict(CLUSTER, memory=plain / 2))))
    return [(name, {"cluster": CLUSTER, **case, "utilisation": 0.5}) for name, case in cases]


@check(points=3)
def best_layout(student, rng, hidden):
    """best_layout: the fastest fitting layout (ties to the least memory), or None when none fits."""
    for i, (name, case) in enumerate(_best_cases(rng, hidden), 1):
        expected = planner.best_layout(**case)
        got = student.call("best_layout", returns="any", **case)
        label = f"{'hidden case' if hidden else 'case'} {i} ({name})"
        if got == expected:
            continue
        if expected is None:
            raise CheckFailure(f"{label}: expected None (no layout fits in memory), got {describe(got)}")
        if not isinstance(got, dict):
            raise CheckFailure(f"{label}: expected a layout dict, got {describe(got)}")
        detail = unredacted(f": expected {expected}, got {got}")
        try:
            m = case["global_batch"] // (got["dp"] * case["micro_batch"])
            memory = planner.memory_per_gpu(case["model"], got, case["gpus"], case["micro_batch"], case["seq"], m)
            seconds = planner.step_time(case["model"], got, case["gpus"], case["micro_batch"], case["seq"], m,
                                        case["cluster"], case["utilisation"])["total"]
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            raise CheckFailure(f"{label}: your layout is not a valid one{detail} ({raised(error)})") from None
        if memory["total"] > case["cluster"]["memory"]:
            why = "it does not fit in the GPU's memory (check your memory terms)"
        else:
            best = planner.step_time(case["model"], expected, case["gpus"], case["micro_batch"], case["seq"],
                                     case["global_batch"] // (expected["dp"] * case["micro_batch"]),
                                     case["cluster"], case["utilisation"])["total"]
            why = ("another fitting layout is faster" if seconds > best * (1 + 1e-9)
                   else "it ties on time; the tie goes to the least memory, then the stated order")
            why += unredacted(f" ({seconds:.4g} s against {best:.4g} s a step)")
        raise CheckFailure(f"{label}: not the best layout{detail}: {why}")
