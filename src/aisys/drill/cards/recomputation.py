"""Activation recomputation (checkpointing): a plan's peak and recomputation, Chen's sqrt(n) rule against the least
peak, the compute it costs, the optimal plan for uneven layers, torch.utils.checkpoint's conventions and selective
recomputation (aisys.autograd.recompute, aisys.parallel.planner)."""

import math

from aisys.autograd import recompute
from aisys.parallel import planner

from ..card import Ask, Choice, Number, card

PAGE = "04-autograd/recomputation"
TOPIC = "autograd and compilers"


@card(topic=TOPIC, difficulty="easy", frequency="high", page=PAGE)
def checkpoint_plan_peak():
    a, c, plan = [4, 1, 2, 8, 1], [1, 2, 3, 4, 5], [0, 3]
    run = recompute.simulate(a, c, plan)
    return Ask(
        f"A chain of {len(a)} layers saves a = {a} MB for its backward pass (each layer its input). Layers "
        f"{plan[0]} and {plan[1]} are checkpoints: each segment after a checkpoint runs under "
        "torch.utils.checkpoint, saving only its input, and is rerun whole during the backward pass. What is the "
        "peak of saved activations, in MB?",
        Number(run["peak"], rel=0.001, unit="MB"),
        f"After the forward pass the checkpoints hold {a[0]} + {a[3]} = {run['held']} MB. The last segment (layers "
        f"3..4) is rerun first, saving {a[3]} + {a[4]} while layer 0's input is still held: {run['peak']} MB. "
        f"Then segment 0..2 holds {sum(a[:3])} MB. Peak {run['peak']} MB, for a recomputation of every layer "
        f"(cost {run['recompute']}).")


@card(topic=TOPIC, difficulty="easy", frequency="high", page=PAGE)
def sqrt_rule_peak():
    n = 64
    plan = recompute.sqrt_plan(n)
    peak = recompute.simulate([1] * n, [1] * n, plan)["peak"]
    s = plan[1]
    return Ask(
        f"{n} equal layers, each saving one unit of activations. Chen's rule keeps a checkpoint every sqrt(n) = {s} "
        "layers and reruns one segment at a time in the backward pass. What is the peak, in layers' activations?",
        Number(peak, rel=0.001),
        f"While the last segment reruns, the {len(plan) - 1} checkpoints before it are held, plus its {s} layers "
        f"(its own checkpoint among them): {len(plan) - 1} + {s} = {peak}, about 2 sqrt(n) = {2 * math.isqrt(n)}, "
        f"against {n} without recomputation, for one extra forward pass.")


@card(topic=TOPIC, difficulty="hard", frequency="medium", page=PAGE)
def least_peak_equal_layers():
    n = 55
    least = recompute.least_budget([1] * n)
    sqrt_peak = recompute.simulate([1] * n, [1] * n, recompute.sqrt_plan(n))["peak"]
    return Ask(
        f"{n} equal layers, each saving one unit; a segment being rerun holds all its layers at once on top of the "
        "checkpoints before it (later checkpoints are already freed). What is the least peak any choice of "
        "checkpoints reaches?",
        Number(least, rel=0.001),
        f"Segment t reruns while only the t - 1 checkpoints before it are held, so each segment can be one layer "
        f"shorter than the one before: segments of k, k - 1, ..., 1 layers all peak at k and cover k(k+1)/2 layers. "
        f"k = {least} covers {least * (least + 1) // 2} = n: peak {least}, about sqrt(2n). Chen's evenly spaced "
        f"sqrt(n) plan peaks at {sqrt_peak}.")


@card(topic=TOPIC, difficulty="medium", frequency="high", page=PAGE)
def full_recomputation_compute():
    n = 24
    rerun = recompute.simulate([1] * n, [1] * n, [0])["recompute"]
    forward, backward = n, 2 * n  # a backward pass costs about two forwards: gradients of inputs and of weights
    factor = (forward + backward + rerun) / (forward + backward)
    return Ask(
        "Full activation recomputation (each transformer layer keeps only its input and reruns its forward pass "
        "during the backward). If a backward pass costs twice a forward pass, by what factor does a training "
        "step's compute grow?",
        Number(factor, rel=0.02),
        f"Forward F, backward about 2F; every layer's forward runs once more: (F + 2F + F) / (F + 2F) = "
        f"{factor:.3f}. This is why Megatron counts 8ND FLOPs per step with full recomputation instead of 6ND.")


@card(topic=TOPIC, difficulty="medium", frequency="medium", page=PAGE)
def optimal_plan_for_uneven_layers():
    a, c = [1] * 9, [1] * 8 + [50]
    sqrt_run = recompute.simulate(a, c, recompute.sqrt_plan(len(a)))
    best = recompute.plan_checkpoints(a, c, sqrt_run["peak"])
    best_run = recompute.simulate(a, c, best)
    options = ("Chen's sqrt(n) rule: checkpoints evenly spaced",
               "keep the layers with the largest activations as checkpoints",
               "a dynamic programme over segments, on (first layer of the segment, memory left)",
               "minimise the number of layers recomputed")
    return Ask(
        "Layers of a chain differ in the bytes they save and in their forward cost. Which finds the plan of least "
        "recomputation within a memory budget?",
        Choice(options, 2),
        f"Only the dynamic programme sees both: on a = {a}, c = {c}, within the sqrt rule's peak of "
        f"{sqrt_run['peak']}, the rule {recompute.sqrt_plan(len(a))} reruns {sqrt_run['recompute']} while {best} "
        f"reruns {best_run['recompute']}: the costly last layer stays a one-layer segment, never rerun. Counting "
        "layers ignores cost; keeping the largest activations spends the budget on exactly those whose dropping "
        "would free the most.")


@card(topic=TOPIC, difficulty="medium", frequency="high", page=PAGE)
def selective_recomputation():
    gpt3 = {"layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 4 * 12288, "vocab": 50257,
            "tied": True, "gated": False}
    saved = {mode: planner.activation_bytes_per_layer(
        gpt3, {"dp": 1, "tp": 1, "pp": 1, "zero": 0, "recompute": mode, "sequence_parallel": False}, 1, 1, 2048)
        for mode in planner.RECOMPUTE}
    options = ("the attention core: QK^T, softmax, its dropout and the product with V",
               "the MLP, whose activations are the largest",
               "the whole layer from its input",
               "the weight matrix products (QKV, output projection, MLP)")
    return Ask("Megatron-LM's selective activation recomputation (Korthikanti et al. 2022) reruns which part of a "
               "transformer layer in the backward pass?",
               Choice(options, 0),
               f"The s x s tensors of attention (softmax output, dropout mask and output: 5as^2b bytes) are the "
               f"largest yet cheapest to rerun. For a GPT-3 layer on a 2048-token sequence the saved activations "
               f"fall from {saved['none'] // 10**6} MB to {saved['selective'] // 10**6} MB "
               f"({saved['selective'] / saved['none']:.0%}), while rerunning only the attention core's two s x s "
               f"products. Full recomputation keeps {saved['full'] // 10**6} MB but reruns the whole forward pass.")
