"""Memory per GPU and time per step of a transformer's training layout (data, tensor, pipeline parallel, ZeRO,
recomputation), and the fastest layout that fits.

Everything is plain data: a model is a dict

    {"layers": L, "hidden": h, "heads": a, "kv_heads": nkv, "ffn": f, "vocab": V, "tied": bool, "gated": bool}

(linear layers without biases, two norms per layer with a weight each and a final one, no position embeddings:
a Llama-like layout; `gated` is a SwiGLU MLP with two input matrices), a layout is a dict

    {"dp": d, "tp": t, "pp": p, "zero": 0-3, "recompute": "none" | "selective" | "full", "sequence_parallel": bool}

and a cluster is a dict of the GPU's and the links' numbers (`cluster()` builds one from aisys.hardware and
aisys.interconnect). Ranks are numbered tensor-parallel fastest, then pipeline, then data parallel (data parallel
outermost, Narayanan et al., SC 2021, section 3).

Memory (bytes, the first pipeline stage's GPU, which holds the input embedding and the most activations):

- model states: 2 bytes of weights, 2 of gradients and 12 of optimizer state (fp32 master weights, Adam's two
  moments) per parameter, 16 in all (Rajbhandari et al., ZeRO, SC 2020, section 3.1); ZeRO stage 1 shards the
  optimizer state over the d data-parallel ranks, stage 2 the gradients too, stage 3 the weights too; a shard
  holds ceil(n / d) of n parameters (the flat buffer padded to d equal parts).
- activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023),
  section 4, counted tensor by tensor for this layout (see `activation_bytes_per_layer`), times L/p layers per
  stage, times the micro-batches in flight on the first stage under 1F1B: min(m, p).

Time (seconds per step; m micro-batches of b sequences of s tokens on each of the d data-parallel replicas):

- compute: 6 N FLOPs per token (8 with full recomputation: the forward runs twice), over all GPUs at a given
  fraction of the GPU's peak;
- pipeline bubble: compute x (p-1)/m, so that the bubble is (p-1)/(m+p-1) of compute + bubble;
- tensor parallel: 4 ring all-reduces of b s h 2 bytes per layer per micro-batch (2 forward, 2 backward; 6 with
  full recomputation), on the critical path; sequence parallelism replaces each by a reduce-scatter and an
  all-gather, the same ring time;
- pipeline: 2 m point-to-point messages of b s h 2 bytes (activations forward, gradients back), on the critical path;
- data parallel: a ring all-reduce of the stage's gradients (2 bytes each), ZeRO 1 and 2 a reduce-scatter and an
  all-gather (the same 2Ψ), ZeRO 3 one reduce-scatter and two all-gathers (3Ψ); it overlaps the last
  micro-batch's backward pass, and only what exceeds it shows.

A group of ranks lies inside one node when its stride times its size divides the GPUs per node; otherwise its
collective runs at the inter-node link's speed.
"""

from .. import hardware, interconnect, model_memory
from .._validate import nonnegative_int, one_of, positive_int, positive_number
from ..collectives import cost
# bytes per element and per parameter: 2 for activations (1 for dropout masks); 2 + 2 + 12 of model states
from ..model_memory import ACTIVATION_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES

MODEL_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "tied", "gated")
RECOMPUTE = ("none", "selective", "full")


# ----------------------------------------------------------------------------------------- arguments


def _model(model: dict) -> dict:
    if not isinstance(model, dict) or set(model) != set(MODEL_KEYS):
        raise ValueError(f"model must be a dict with keys {', '.join(MODEL_KEYS)}; got {model!r}")
    checked = {key: positive_int(f"model['{key}']", model[key]) for key in MODEL_KEYS[:6]}
    for key in ("tied", "gated"):
        if not isinstance(model[key], bool):
            raise ValueError(f"model['{key}'] must be True or False, got {model[key]!r}")
        checked[key] = model[key]
    if checked["hidden"] % checked["heads"]:
        raise ValueError(f"model['hidden'] ({checked['hidden']}) must be a multiple of model['heads'] "
                         f"({checked['heads']})")
    if checked["heads"] % checked["kv_heads"]:
        raise ValueError(f"model['heads'] ({checked['heads']}) must be a multiple of model['kv_heads'] "
                         f"({checked['kv_heads']})")
    return checked


def _layout(layout: dict, model: dict, gpus: int) -> dict:
    keys = ("dp", "tp", "pp", "zero", "recompute", "sequence_parallel")
    if not isinstance(layout, dict) or set(layout) != set(keys):
        raise ValueError(f"layout must be a dict with keys {', '.join(keys)}; got {layout!r}")
    d, t, p = (positive_int(f"layout['{key}']", layout[key]) for key in ("dp", "tp", "pp"))
    gpus = positive_int("gpus", gpus)
    if d * t * p != gpus:
        raise ValueError(f"dp x tp x pp must equal gpus: {d} x {t} x {p} = {d * t * p}, but gpus = {gpus}")
    zero = nonnegative_int("layout['zero']", layout["zero"])
    if zero > 3:
        raise ValueError(f"layout['zero'] must be 0, 1, 2 or 3, got {zero}")
    one_of("layout['recompute']", layout["recompute"], RECOMPUTE)
    if not isinstance(layout["sequence_parallel"], bool):
        raise ValueError(f"layout['sequence_parallel'] must be True or False, got {layout['sequence_parallel']!r}")
    for key in ("heads", "kv_heads", "ffn"):
        if model[key] % t:
            raise ValueError(f"model['{key}'] ({model[key]}) must be divisible by layout['tp'] ({t}): tensor "
                             f"parallelism splits the {key} evenly over its ranks")
    if model["layers"] % p:
        raise ValueError(f"model['layers'] ({model['layers']}) must be divisible by layout['pp'] ({p}): each "
                         "pipeline stage holds the same number of layers")
    return dict(layout)


def _batch(micro_batch: int, seq: int, micro_batches: int) -> tuple[int, int, int]:
    return (positive_int("micro_batch", micro_batch), positive_int("seq", seq),
            positive_int("micro_batches", micro_batches))


# ----------------------------------------------------------------------------------------- parameters


def _layer_parameters(model: dict) -> tuple[int, int]:
    """(parameters of one layer's matrices, of its two norms): the matrices are what tensor parallelism splits."""
    layer = model_memory.layer_parameters(model_memory.from_planner(model), moe=False)
    return layer["attention"] + layer["mlp"], layer["norms"]


def parameter_count(model: dict) -> int:
    """Parameters of the whole model: embedding, L layers, final norm, and the output head unless tied."""
    return model_memory.parameter_count(model_memory.from_planner(_model(model)))["total"]


def parameters_per_gpu(model: dict, layout: dict, gpus: int) -> int:
    """Parameters a GPU of the first pipeline stage holds before ZeRO: its L/p layers' matrices split t ways (norm
    weights replicated), the input embedding's ceil(V/t) rows; with one stage also the final norm and, untied, the
    output head."""
    model = _model(model)
    layout = _layout(layout, model, gpus)
    t, p = layout["tp"], layout["pp"]
    matrices, norms = _layer_parameters(model)
    rows = -(-model["vocab"] // t)  # vocabulary-parallel embedding, padded to t equal slices
    count = model["layers"] // p * (matrices // t + norms) + rows * model["hidden"]
    if p == 1:
        count += model["hidden"] + (0 if model["tied"] else rows * model["hidden"])
    return count


def _shard(count: int, ways: int) -> int:
    return -(-count // ways)


def model_state_bytes(model: dict, layout: dict, gpus: int) -> dict:
    """Bytes of weights, gradients and optimizer state on one GPU, after ZeRO's sharding over the d replicas."""
    n = parameters_per_gpu(model, layout, gpus)
    d, zero = layout["dp"], layout["zero"]
    return {"parameters": WEIGHT_BYTES * (_shard(n, d) if zero >= 3 else n),
            "gradients": GRADIENT_BYTES * (_shard(n, d) if zero >= 2 else n),
            "optimizer": OPTIMIZER_BYTES * (_shard(n, d) if zero >= 1 else n)}


# ----------------------------------------------------------------------------------------- activations


def activation_bytes_per_layer(model: dict, layout: dict, gpus: int, micro_batch: int, seq: int) -> int:
    """Bytes one layer keeps for its backward pass, for one micro-batch, on one GPU.

    Korthikanti et al. (2023), section 4.1, tensor by tensor (2-byte activations, 1-byte dropout masks), with
    h_kv = kv_heads x head size and f the MLP's width:

      replicated over tensor-parallel ranks (sharded only by sequence parallelism), 10 s b h:
        the two norms' inputs 4sbh, the attention's and the MLP's inputs 4sbh, two dropout masks 2sbh;
      split by tensor parallelism, s b (4h + 4h_kv + F) + 5 a s^2 b:
        Q 2sbh, K and V 4sbh_kv, the output projection's input 2sbh, the MLP's inner activations F
        (4f: the GeLU's input and the down projection's; gated 8f: gate and up, SiLU(gate), their product),
        and the attention's softmax output, its dropout mask and the dropout's output: 5as^2b.

    With h_kv = h and f = 4h this is the paper's s b h (34 + 5as/h). Tensor parallelism divides the second group by
    t, sequence parallelism the first by t too (Table 2); selective recomputation drops the 5as^2b term (it
    recomputes the attention core); full recomputation keeps only the layer's input, 2sbh (divided by t with
    sequence parallelism, whose input is split along the sequence).
    """
    model = _model(model)
    layout = _layout(layout, model, gpus)
    b, s = positive_int("micro_batch", micro_batch), positive_int("seq", seq)
    t, sp = layout["tp"], layout["sequence_parallel"]
    if layout["recompute"] == "full":
        return 2 * s * b * model["hidden"] // (t if sp else 1)
    terms = model_memory.activation_terms(model_memory.from_planner(model))  # bytes per token, by group
    replicated = s * b * terms["replicated"]
    split = s * b * terms["split"]
    if layout["recompute"] == "none":
        split += s * s * b * terms["scores"]
    return (replicated // t if sp else replicated) + split // t


def in_flight(layout: dict, micro_batches: int) -> int:
    """Micro-batches whose activations the first stage holds at once under 1F1B: p (all of them when m < p)."""
    return min(layout["pp"], positive_int("micro_batches", micro_batches))


def memory_per_gpu(model: dict, layout: dict, gpus: int, micro_batch: int, seq: int, micro_batches: int) -> dict:
    """Bytes on a GPU of the first pipeline stage: parameters, gradients, optimizer, activations and their total."""
    _batch(micro_batch, seq, micro_batches)
    states = model_state_bytes(model, layout, gpus)
    per_layer = activation_bytes_per_layer(model, layout, gpus, micro_batch, seq)
    activations = per_layer * (model["layers"] // layout["pp"]) * in_flight(layout, micro_batches)
    return {**states, "activations": activations, "total": sum(states.values()) + activations}


# ----------------------------------------------------------------------------------------- time


CLUSTER_KEYS = ("gpus_per_node", "memory", "peak_flops", "intra_bandwidth", "intra_alpha", "inter_bandwidth",
                "inter_alpha")


def cluster(chip: str = "NVIDIA H100 SXM5 80GB", gpus_per_node: int = 8, inter: str = "InfiniBand NDR",
            dtype: str = "bf16") -> dict:
    """A cluster's numbers from aisys.hardware and aisys.interconnect: the GPU's memory and peak, NVLink inside a
    node, and one `inter` port per GPU between nodes; α per ring step from NCCL's tuning model (Simple protocol)."""
    gpu = hardware.chip(chip)
    link = interconnect.LINKS[interconnect.GPU_LINK[gpu.name]]
    network = one_of("inter", inter, tuple(interconnect.LINKS))
    return {"gpus_per_node": positive_int("gpus_per_node", gpus_per_node), "memory": gpu.memory_bytes,
            "peak_flops": gpu.peak(dtype), "intra_bandwidth": link.bandwidth,
            "intra_alpha": interconnect.NCCL_RING_STEP_LATENCY["NVLink"]["Simple"],
            "inter_bandwidth": interconnect.LINKS[network].bandwidth,
            "inter_alpha": interconnect.NCCL_RING_STEP_LATENCY["network"]["Simple"]}


def _cluster(cluster: dict) -> dict:
    if not isinstance(cluster, dict) or set(cluster) != set(CLUSTER_KEYS):
        raise ValueError(f"cluster must be a dict with keys {', '.join(CLUSTER_KEYS)}; got {cluster!r}")
    checked = {key: positive_number(f"cluster['{key}']", cluster[key]) for key in CLUSTER_KEYS[1:]}
    return {"gpus_per_node": positive_int("cluster['gpus_per_node']", cluster["gpus_per_node"]), **checked}


def within_node(stride: int, size: int, gpus_per_node: int) -> bool:
    """Whether a group of `size` ranks `stride` apart lies inside one node (nodes hold consecutive ranks)."""
    return gpus_per_node % (stride * size) == 0


def _link(cluster: dict, inside: bool) -> tuple[float, float]:
    """(α, β) of the link a group inside one node, or one spanning nodes, communicates over."""
    if inside:
        return cluster["intra_alpha"], 1 / cluster["intra_bandwidth"]
    return cluster["inter_alpha"], 1 / cluster["inter_bandwidth"]


def step_time(model: dict, layout: dict, gpus: int, micro_batch: int, seq: int, micro_batches: int, cluster: dict,
              utilisation: float) -> dict:
    """Seconds of one training step, by term (see the module's docstring for what overlaps and what does not)."""
    model = _model(model)
    layout = _layout(layout, model, gpus)
    b, s, m = _batch(micro_batch, seq, micro_batches)
    cluster = _cluster(cluster)
    utilisation = positive_number("utilisation", utilisation)
    d, t, p = layout["dp"], layout["tp"], layout["pp"]
    g = cluster["gpus_per_node"]
    full = layout["recompute"] == "full"

    tokens = d * m * b * s
    flops = (8 if full else 6) * parameter_count(model) * tokens
    compute = flops / (gpus * cluster["peak_flops"] * utilisation)
    bubble = compute * (p - 1) / m
    activation = b * s * model["hidden"] * ACTIVATION_BYTES  # one micro-batch's (s, b, h) tensor

    tp = 0.0
    if t > 1:
        alpha, beta = _link(cluster, within_node(1, t, g))
        per_layer = 6 if full else 4
        tp = model["layers"] // p * m * per_layer * cost.time("all_reduce", "ring", activation, t, alpha, beta)

    pp = 0.0
    if p > 1:
        alpha, beta = _link(cluster, within_node(t, p, g))
        pp = 2 * m * (alpha + activation * beta)

    dp = exposed = 0.0
    if d > 1:
        alpha, beta = _link(cluster, within_node(t * p, d, g))
        gradients = GRADIENT_BYTES * parameters_per_gpu(model, layout, gpus)
        dp = cost.time("all_reduce", "ring", gradients, d, alpha, beta) * (1.5 if layout["zero"] == 3 else 1.0)
        backward = compute / m * (6 if full else 4) / (8 if full else 6)  # the last micro-batch's backward pass
        exposed = max(0.0, dp - backward)

    total = compute + bubble + tp + pp + exposed
    return {"compute": compute, "bubble": bubble, "tp": tp, "pp": pp, "dp": dp, "dp_exposed": exposed,
            "bubble_fraction": (p - 1) / (m + p - 1), "total": total}


# ----------------------------------------------------------------------------------------- search


def layouts(model: dict, gpus: int, global_batch: int, micro_batch: int):
    """Every layout for `gpus` GPUs that the model and the batch allow: d t p = gpus, t dividing the heads, kv heads
    and the MLP, p dividing the layers, d b dividing the global batch; with each ZeRO stage, recomputation, and
    sequence parallelism on and off (on only where t > 1). Yields (layout, micro_batches)."""
    model = _model(model)
    gpus, global_batch = positive_int("gpus", gpus), positive_int("global_batch", global_batch)
    micro_batch = positive_int("micro_batch", micro_batch)
    divisors = [k for k in range(1, gpus + 1) if gpus % k == 0]
    for t in divisors:
        if any(model[key] % t for key in ("heads", "kv_heads", "ffn")):
            continue
        for p in divisors:
            if (gpus // t) % p or model["layers"] % p:
                continue
            d = gpus // (t * p)
            if global_batch % (d * micro_batch):
                continue
            for zero in range(4):
                for recompute in RECOMPUTE:
                    for sp in ((False, True) if t > 1 else (False,)):
                        yield ({"dp": d, "tp": t, "pp": p, "zero": zero, "recompute": recompute,
                                "sequence_parallel": sp}, global_batch // (d * micro_batch))


def best_layout(model: dict, gpus: int, global_batch: int, micro_batch: int, seq: int, cluster: dict,
                utilisation: float) -> dict | None:
    """The fastest layout whose memory per GPU fits the GPU's, or None when none fits.

    Among layouts whose step times are equal (within a relative 1e-9: ZeRO 0, 1 and 2 cost the same time), the one
    with the least memory per GPU; then the first in the order `layouts` yields them.
    """
    cluster = _cluster(cluster)
    fitting = []
    for layout, m in layouts(model, gpus, global_batch, micro_batch):
        memory = memory_per_gpu(model, layout, gpus, micro_batch, seq, m)["total"]
        if memory <= cluster["memory"]:
            seconds = step_time(model, layout, gpus, micro_batch, seq, m, cluster, utilisation)["total"]
            fitting.append((seconds, memory, layout))
    if not fitting:
        return None
    fastest = min(seconds for seconds, _, _ in fitting)
    tied = [(memory, i, layout) for i, (seconds, memory, layout) in enumerate(fitting)
            if seconds <= fastest * (1 + 1e-9)]
    return min(tied, key=lambda entry: entry[:2])[2]


def training_days(parameters: float, tokens: float, gpus: int, peak_flops: float, utilisation: float) -> float:
    """Days to train on `tokens` tokens: 6 N D FLOPs at `utilisation` of `gpus` GPUs' peak."""
    seconds = 6 * positive_number("parameters", parameters) * positive_number("tokens", tokens) / (
        positive_int("gpus", gpus) * positive_number("peak_flops", peak_flops) * positive_number("utilisation",
                                                                                               utilisation))
    return seconds / 86400

