"""Pipeline parallelism: the bubble of GPipe and 1F1B, micro-batches needed for a target bubble, peak activations of
GPipe against 1F1B, interleaving's trade-off, and why a pipeline's sends must not block (aisys.parallel.pipeline)."""

from aisys.parallel import pipeline

from ..card import Ask, Choice, Number, card

PAGE = "05-parallel-training/pipeline"


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def gpipe_bubble_fraction():
    p, m = 8, 32
    bubble = pipeline.bubble_fraction(p, m)
    return Ask(
        f"A GPipe pipeline has p = {p} stages and m = {m} micro-batches, every stage equally fast. What fraction of "
        "the devices' time is idle (the bubble), as a number between 0 and 1?",
        Number(bubble, rel=0.02),
        f"Fill and drain take p - 1 = {p - 1} steps on top of m = {m}: the makespan is (m + p - 1)(t_f + t_b), each "
        f"device busy m(t_f + t_b), so the bubble is (p - 1)/(m + p - 1) = {p - 1}/{m + p - 1} = {bubble:.3f}. "
        f"(p - 1)/m = {(p - 1) / m:.3f} is the same idle time over the work, not over the makespan.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def micro_batches_for_a_small_bubble():
    p = 8
    m = next(m for m in range(1, 10**4) if pipeline.bubble_fraction(p, m) <= 1 / 20)
    return Ask(
        f"With p = {p} pipeline stages (GPipe or 1F1B), what is the smallest number of micro-batches m that keeps "
        "the bubble at or below 5%?",
        Number(m, rel=0.001),
        f"(p - 1)/(m + p - 1) <= 1/20 means m >= 19(p - 1) = {19 * (p - 1)}: m = {m}. The bubble shrinks only as 1/m, "
        "which is why 1F1B (memory independent of m) or interleaving (bubble divided by v) matter.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def one_f_one_b_peak_activations():
    p, m = 4, 16
    gpipe_peak = pipeline.simulate(pipeline.gpipe(p, m), 1, 2)["peak"][0]
    ofob_peak = pipeline.simulate(pipeline.one_f_one_b(p, m), 1, 2)["peak"][0]
    return Ask(
        f"p = {p} stages, m = {m} micro-batches, 1F1B (PipeDream-Flush). At most how many micro-batches' activations "
        "does the FIRST stage hold at once?",
        Number(ofob_peak, rel=0.001),
        f"Stage s warms up with p - s - 1 forwards and then frees one micro-batch for each new one: stage 0 holds at "
        f"most p = {ofob_peak}, whatever m. GPipe runs all forwards first and holds m = {gpipe_peak} on every stage; "
        "the bubble of the two is the same.")


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def one_f_one_b_against_gpipe():
    p, m = 4, 8
    same = pipeline.simulate(pipeline.gpipe(p, m), 1, 2)["makespan"] == \
        pipeline.simulate(pipeline.one_f_one_b(p, m), 1, 2)["makespan"]
    options = ("a smaller bubble, the same activation memory",
               "the same bubble, activations of at most p micro-batches instead of m",
               "no bubble at all, at the cost of stale weights",
               "half the messages between stages")
    return Ask("Compared with GPipe on the same p and m (flushed, synchronous), what does 1F1B give?",
               Choice(options, 1),
               f"Simulated on p = {p}, m = {m}: the makespans are {'equal' if same else 'different'}. 1F1B reorders "
               "the work so that each backward starts as soon as it can and frees its micro-batch; the fill and "
               "drain, and so the bubble (p - 1)/(m + p - 1), stay. PipeDream without flushes removes the bubble "
               "with stale weights; that is not 1F1B-Flush.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def interleaved_bubble():
    p, m, v = 4, 8, 2
    bubble = pipeline.simulate(pipeline.interleaved(p, m, v), 1, 2)["bubble"]
    return Ask(
        f"Megatron-LM's interleaved 1F1B with p = {p} devices, m = {m} micro-batches and v = {v} model chunks per "
        "device, stages equally fast. What is the bubble fraction (0 to 1)?",
        Number(bubble, rel=0.02),
        f"Each chunk's step is 1/v of a stage's, so fill and drain cost v times less: (p - 1)/(v m + p - 1) = "
        f"{p - 1}/{v * m + p - 1} = {bubble:.3f}, against {pipeline.bubble_fraction(p, m):.3f} for 1F1B. The "
        f"price: a micro-batch crosses p v - 1 = {p * v - 1} boundaries instead of {p - 1}, v times the messages, "
        "and the longer warm-up holds more activations.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def interleaved_trade_off():
    options = ("the bubble divided by about v, and v times the point-to-point messages",
               "the bubble divided by v, and v times less activation memory",
               "the same bubble, and v times fewer messages",
               "no change in time: only the weights are spread more evenly")
    return Ask("Interleaving v model chunks per device (Narayanan et al., SC 2021) changes a 1F1B pipeline how?",
               Choice(options, 0),
               f"The bubble goes from (p - 1)/(m + p - 1) to (p - 1)/(v m + p - 1) (for p = 4, m = 8, v = 2: "
               f"{pipeline.bubble_fraction(4, 8):.3f} to {pipeline.bubble_fraction(4, 8, 2):.3f}); every micro-batch "
               "now goes around the devices v times, so each device sends v times as many activations and "
               "gradients. Activation memory does not shrink: the warm-up is longer.")


@card(topic="parallel training", difficulty="hard", frequency="medium", page=PAGE)
def blocking_sends_deadlock():
    options = ("stage s blocks sending an activation to s + 1 while s + 1 blocks sending a gradient to s",
               "the last stage waits for a gradient nobody sends",
               "stage 0 receives before anything was sent",
               "gloo cannot send float64 tensors")
    schedule = pipeline.one_f_one_b(2, 4)
    return Ask("An executor of the 1F1B schedule on real processes uses a blocking dist.send (which waits until the "
               "receiver takes the message) for every activation and gradient. Why does it hang?",
               Choice(options, 0),
               f"With p = 2, m = 4, stage 0 runs {schedule[0][:3]} and stage 1 runs {schedule[1][:2]}: after its "
               "first forward stage 1 sends a gradient back while stage 0, in its warm-up, sends the next "
               "activation; each waits in its send for the other to receive. Post sends with isend (or pair send and "
               "receive with batch_isend_irecv, as Megatron-LM does) and a receive waits only for what the schedule "
               "makes available.")
