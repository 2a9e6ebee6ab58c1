"""Parallel training's memory and time: bytes per parameter under mixed precision and ZeRO, the activation formula's
terms, 6ND, the pipeline bubble, and which layout a case calls for (aisys.parallel.planner, aisys.mixed_precision)."""

from aisys import prose
from aisys.hardware import CHIPS
from aisys.mixed_precision import training_bytes_per_parameter
from aisys.parallel import planner

from ..card import Ask, Choice, Number, card

WALLS = "05-parallel-training/walls"
LAYOUTS = "05-parallel-training/layouts"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
GB = 10**9
GPT3 = {"layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 4 * 12288, "vocab": 50257,
        "tied": True, "gated": False}


def _layout(d, t, p, zero=0, recompute="none", sp=False):
    return {"dp": d, "tp": t, "pp": p, "zero": zero, "recompute": recompute, "sequence_parallel": sp}


@card(topic="parallel training", difficulty="easy", frequency="high", page=WALLS)
def adam_mixed_precision_bytes_per_parameter():
    per = training_bytes_per_parameter()
    return Ask(
        "Mixed-precision training with Adam: how many bytes of model state does each parameter take (weights, "
        "gradients, optimizer), before activations?",
        Number(per, rel=0.01, unit="bytes"),
        f"{per:g}: fp16 weights (2) and gradients (2), and for the optimizer an fp32 master copy (4), Adam's "
        "momentum (4) and variance (4) (ZeRO, section 3.1). The fp32 copy exists because an fp16 weight cannot "
        f"absorb a small update. A 7B model needs {7 * per:.0f} GB of state: it does not fit one "
        f"{H100.memory_bytes / GB:.0f} GB H100 even before its activations.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=WALLS)
def zero2_bytes_per_parameter():
    d = 64
    per = 2 + (2 + 12) / d
    return Ask(
        f"Under ZeRO stage 2 over {d} data-parallel GPUs, how many bytes of model state does each GPU keep per "
        "parameter of the model (mixed precision with Adam)?",
        Number(per, rel=0.02, unit="bytes"),
        f"Stage 2 shards the gradients (2 bytes) and the optimizer state (12 bytes) over the {d} replicas and keeps "
        f"the fp16 weights whole: 2 + 14 / {d} = {per:.3g} bytes. Stage 1 would keep 4 + 12 / {d}, stage 3 "
        f"16 / {d} = {16 / d:.3g}. Activations are not sharded by any stage.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=WALLS)
def six_n_d_training_days():
    n, tokens, gpus = planner.parameter_count(GPT3), 300 * GB, 1024
    utilisation = 1 / 2
    days = planner.training_days(n, tokens, gpus, H100.peak("bf16"), utilisation)
    return Ask(
        f"GPT-3 ({n / GB:.0f}B parameters) trains on 300B tokens. On {gpus} H100s "
        f"({prose.rate(H100.peak('bf16'), 'FLOP/s')} dense BF16 each) at half the peak, about how many days?",
        Number(days, rel=0.1, unit="days"),
        f"6ND = 6 x {n:.3g} x {tokens:.3g} = {6 * n * tokens:.3g} FLOPs (2 per parameter per token forward, 4 "
        f"backward). Divided by {gpus} x {H100.peak('bf16'):.3g} x 0.5 FLOP/s: {days:.1f} days. With full "
        "activation recomputation the forward runs twice: 8ND, a third longer.")


@card(topic="attention", difficulty="hard", frequency="medium", page=WALLS)
def activation_formula_score_term():
    s, a, h = 2048, GPT3["heads"], GPT3["hidden"]
    ratio = 5 * a * s / h
    return Ask(
        f"Korthikanti et al. count a transformer layer's activations as s b h (34 + 5 a s / h) bytes. For GPT-3 (h = "
        f"{h}, a = {a}) at s = {s}, what is 5 a s / h, the attention scores' share beside the 34?",
        Number(ratio, rel=0.02, unit=""),
        f"5 x {a} x {s} / {h} = {ratio:.0f}, against 34 for everything else: the a score matrices of s x s (softmax "
        "output 2 bytes, dropout mask 1, dropout output 2) dominate. That is why selective recomputation recomputes "
        "only the attention core: it removes most of the memory for a few percent of the compute.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=LAYOUTS)
def pipeline_bubble_fraction():
    p, m = 8, 24
    fraction = (p - 1) / (m + p - 1)
    return Ask(
        f"A 1F1B pipeline of {p} stages runs {m} micro-batches a step. What fraction of each GPU's step time is the "
        "bubble (idle)?",
        Number(fraction, rel=0.02, unit=""),
        f"(p - 1) / (m + p - 1) = {p - 1} / {m + p - 1} = {fraction:.3f}: each stage waits p - 1 slots to fill "
        f"and drain against m slots of work. (p - 1) / m = {(p - 1) / m:.3f} is the bubble relative to the work, "
        "not to the step. 1F1B has the same bubble as GPipe; it holds p micro-batches' activations instead of m.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=LAYOUTS)
def one_f_one_b_in_flight():
    p, m = 16, 64
    return Ask(
        f"A 1F1B pipeline has {p} stages and runs {m} micro-batches a step. How many micro-batches' activations "
        "does the first stage hold at its peak?",
        Number(min(p, m), rel=0.01, unit="micro-batches"),
        f"min(p, m) = {min(p, m)}: the first stage runs p forwards before its first backward, then alternates. "
        f"Each holds L/p layers, so p in flight make L layers' worth: pipeline parallelism does not divide the "
        f"first stage's activations. GPipe would hold all {m}.")


@card(topic="parallel training", difficulty="hard", frequency="medium", page=LAYOUTS)
def which_layout_for_a_node_limit():
    cluster = planner.cluster()
    options = ("tensor parallelism across nodes (t = 16), no pipeline",
               "tensor parallelism within a node (t = 8) and two pipeline stages across nodes",
               "data parallelism over all 16 GPUs with ZeRO-0",
               "two pipeline stages and no tensor parallelism")
    model = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 64, "ffn": 32768, "vocab": 50304,
             "tied": False, "gated": False}
    best = planner.best_layout(model, 16, 1, 1, 4096, cluster, 1 / 2)
    answer = 1 if (best["tp"], best["pp"]) == (8, 2) else 0
    return Ask(
        "A 65B-parameter model must be split over 16 H100s in two nodes of 8 (NVLink inside, one InfiniBand "
        "NDR port per GPU between). Model parallelism of 16 is needed to fit. Which layout is faster?",
        Choice(options, answer),
        f"{options[answer]}. A TP group pays 4 all-reduces of a whole activation per layer per micro-batch; across "
        f"nodes they run at {prose.rate(cluster['inter_bandwidth'], 'B/s')} instead of NVLink's "
        f"{prose.rate(cluster['intra_bandwidth'], 'B/s')}. A pipeline stage boundary sends one activation per "
        "micro-batch: pipeline parallelism goes across nodes (Narayanan et al., SC 2021, takeaway 1). The planner "
        f"picks d = {best['dp']}, t = {best['tp']}, p = {best['pp']}.")
