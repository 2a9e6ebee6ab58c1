"""Mixed-precision training: why the loss is scaled, when a dynamic scaler backs off and grows, why NaN must be
caught, why BF16 needs no scale, the bytes of the FP32 master weights, and the scaler under sharded gradients
(aisys.parallel.loss_scaling, aisys.mixed_precision)."""

import math

from aisys import mixed_precision as mp
from aisys.dtypes import bytes_per_element
from aisys.parallel import loss_scaling as ls

from ..card import Ask, Choice, Number, card

PAGE = "05-parallel-training/mixed-precision"
GB = 10**9


@card(topic="number formats", difficulty="easy", frequency="high", page=PAGE)
def why_scale_the_loss():
    fp16 = mp.FORMATS["fp16"]
    options = ("small gradients flush to zero in FP16; multiplying the loss by S multiplies every gradient by S "
               "and lifts them into range",
               "FP16 weights ignore small updates; scaling the loss makes the updates larger",
               "large gradients overflow FP16; scaling the loss down keeps them finite",
               "it speeds up convergence, like a larger learning rate")
    return Ask(
        "In FP16 mixed-precision training the loss is multiplied by a scale S before backward(), and the weight "
        "gradients are divided by S afterwards. What does that fix?",
        Choice(options, 0),
        f"FP16's smallest subnormal is 2^{math.log2(fp16.smallest_subnormal):.0f} and its smallest normal "
        f"2^{math.log2(fp16.smallest_normal):.0f}; many activation gradients lie below (Micikevicius et al. 2018, "
        "section 3.2). The chain rule is linear, so every gradient comes out S times larger: a power of two moves "
        "the exponent and changes no significant bit. Dividing by S in FP32 gives the same update as without "
        "scaling. Lost updates to FP16 weights are fixed by the FP32 master copy, not by the scale.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def when_the_scale_backs_off():
    options = ("when any element of any gradient is inf or NaN: the step is skipped, the scale multiplied by "
               "backoff_factor and the count of good steps reset",
               "when the loss goes up: the step is taken with a halved scale",
               "when the gradient norm exceeds a threshold: the gradients are clipped and the step taken",
               "every growth_interval steps, to keep the scale from drifting")
    return Ask(
        "torch.amp.GradScaler changes its scale dynamically. When does it back off the scale, and what happens to "
        "that step?",
        Choice(options, 0),
        f"unscale_ multiplies the gradients by 1/S in FP32 and sets found_inf if any value is not finite; step() "
        f"then skips optimizer.step(), and update() multiplies S by backoff_factor ({ls.DEFAULT_BACKOFF_FACTOR}) "
        f"and sets the growth tracker to 0. After growth_interval ({ls.DEFAULT_GROWTH_INTERVAL}) good steps in a "
        f"row, S is multiplied by growth_factor ({ls.DEFAULT_GROWTH_FACTOR}). The weights never see the overflowed "
        "gradient.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def steps_to_first_growth():
    overflows = 4
    scaler, step = ls.new_scaler(), 0
    for flag in [True] * overflows + [False] * (2 * ls.DEFAULT_GROWTH_INTERVAL):
        grown = ls.update_scale(scaler, flag)
        step += 1
        if grown["scale"] > scaler["scale"]:
            break
        scaler = grown
    before, after = math.log2(scaler["scale"]), math.log2(grown["scale"])
    return Ask(
        f"A GradScaler with its defaults (scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval "
        f"{ls.DEFAULT_GROWTH_INTERVAL}). The first {overflows} steps overflow; every later one is good. After how many "
        "steps in all (the overflowed ones included) is the scale first multiplied by 2?",
        Number(step, rel=0, abs=0.5, unit="steps"),
        f"Each overflow halves the scale and resets the tracker: 2^16 falls to 2^{before:.0f} after {overflows} "
        f"steps. The tracker then counts good steps and the scale grows on the {ls.DEFAULT_GROWTH_INTERVAL}th (the "
        f"count includes that step): {overflows} + {ls.DEFAULT_GROWTH_INTERVAL} = {step}, and the scale becomes "
        f"2^{after:.0f}.")


@card(topic="number formats", difficulty="easy", frequency="medium", page=PAGE)
def nan_passes_a_max_test():
    options = ("not all finite: np.isfinite(g).all() is False for +inf, -inf and NaN",
               "np.isinf(g).any()",
               "np.abs(g).max() > 65504",
               "(g == float('inf')).any() or (g == -float('inf')).any()")
    return Ask(
        "Which test on a gradient tensor g tells a scaler that the step overflowed, in every case?",
        Choice(options, 0),
        "An overflow to inf in one place becomes NaN downstream (inf - inf in a sum, 0 * inf), and a gradient can "
        "hold NaN and no inf. isinf misses NaN; any comparison with NaN is False, so a max test misses it too (and "
        "numpy's max of an array with NaN is NaN). torch's kernel tests !isfinite.")


@card(topic="number formats", difficulty="easy", frequency="high", page=PAGE)
def bf16_needs_no_loss_scale():
    bf16, fp16, fp32 = mp.FORMATS["bf16"], mp.FORMATS["fp16"], mp.FORMATS["fp32"]
    options = ("BF16 has FP32's 8 exponent bits: its range reaches down to FP32's, so small gradients do not flush "
               "to zero",
               "BF16 has more significant bits than FP16, so small gradients keep their digits",
               "BF16 training accumulates gradients in FP32, so nothing underflows",
               "BF16 rounds stochastically, so underflowed gradients are nonzero on average")
    return Ask("Why does BF16 training normally run without a loss scale, where FP16 training needs one?",
               Choice(options, 0),
               f"Smallest normal: BF16 2^{math.log2(bf16.smallest_normal):.0f} (FP32 "
               f"2^{math.log2(fp32.smallest_normal):.0f}), FP16 2^{math.log2(fp16.smallest_normal):.0f}; largest: BF16 "
               f"{bf16.largest:.2e}, FP16 {fp16.largest:g}. BF16 has fewer significant bits ({bf16.precision}) than "
               f"FP16 ({fp16.precision}): it gives up precision, not range, which is why the FP32 master weights stay.")


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def master_weights_gigabytes():
    params = 7 * 10**9
    master = params * bytes_per_element("fp32")
    total = params * mp.training_bytes_per_parameter()
    return Ask(
        "Mixed-precision training with Adam of a 7B-parameter model: how many GB do the FP32 master weights alone "
        "take (1 GB = 10^9 bytes)?",
        Number(master / GB, rel=0.02, unit="GB"),
        f"4 bytes x 7e9 = {master / GB:g} GB. With the FP16 weights and gradients (2 + 2 bytes) and Adam's two FP32 "
        f"moments (4 + 4) the states take {mp.training_bytes_per_parameter():g} bytes per parameter, "
        f"{total / GB:g} GB, before activations: more than one 80 GB GPU, which is what ZeRO shards.")


@card(topic="number formats", difficulty="hard", frequency="medium", page=PAGE)
def smallest_scale_to_normal():
    gradient = 10**-8
    normal = mp.FORMATS["fp16"].smallest_normal
    k = math.ceil(math.log2(normal / gradient))
    flushed = float(mp.round_to(gradient, "fp16")) == 0
    return Ask(
        f"A gradient of {gradient:g} is cast to FP16. What is the smallest k for which the loss scale S = 2^k makes "
        "S times it a normal FP16 number (not a subnormal)?",
        Number(k, rel=0, abs=0.5, unit=""),
        f"FP16's smallest normal is 2^{math.log2(normal):.0f} = {normal:.3g}; log2({gradient:g}) = "
        f"{math.log2(gradient):.2f}, so k >= {math.log2(normal):.0f} - ({math.log2(gradient):.2f}) = "
        f"{math.log2(normal / gradient):.2f}: k = {k}. Unscaled it is "
        f"{'below' if flushed else 'above'} half of the smallest subnormal 2^-24 and becomes "
        f"{'0' if flushed else 'a subnormal with few significant bits'} in FP16; with S = 2^{k} it keeps all 11 "
        "bits.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def sharded_found_inf():
    options = ("all-reduce the found-inf flag (a max, or a sum) over the ranks before deciding to step",
               "nothing: every rank sees the same gradients",
               "only rank 0 checks, then broadcasts its weights",
               "each rank skips its own shard's update when it finds inf")
    return Ask(
        "With ZeRO-2/3 or FSDP each rank holds only its shard of the gradients. What must a loss scaler do so that "
        "the replicas stay identical?",
        Choice(options, 0),
        "Each rank can only look at its shard, and an overflow may be in one shard only. If ranks decided alone, "
        "one would skip while another stepped, and the parameters would part ways. torch's ShardedGradScaler "
        "all-reduces found_inf before the step. Under DDP the all-reduced gradient already carries the inf to "
        "every rank.")
