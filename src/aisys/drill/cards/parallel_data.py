"""Data parallelism: a parameter server's link against a ring all-reduce, DDP's buckets (their order, why they exist,
the cap rule, unused parameters) and stale-synchronous SGD's gate (aisys.parallel.sync, aisys.parallel.ddp)."""

import numpy as np

from aisys.parallel import sync

from ..card import Ask, Choice, Number, card

PAGE = "05-parallel-training/data-parallel"
GB = 10**9
MB = 10**6


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def parameter_server_link_bytes():
    workers, n = 16, 2 * GB
    load = sync.parameter_server_bytes(n, workers)
    return Ask(
        f"{workers} data-parallel workers and ONE parameter server; the gradient (and the weights) take {n / GB:g} GB. "
        "Each step every worker pushes its gradient and pulls the new weights. How many GB cross the server's link "
        "per step, in each direction?",
        Number(load["server_receives"] / GB, rel=0.01, unit="GB"),
        f"Each worker sends {n / GB:g} GB and receives {n / GB:g} GB; the server takes in all {workers} gradients, "
        f"{workers} x {n / GB:g} = {load['server_receives'] / GB:g} GB, and sends as much back. Its link carries p "
        "times a worker's load: the bottleneck, growing with the number of workers. Sharding the parameters over s "
        "servers divides it by s.")


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def data_parallel_ring_bytes_per_worker():
    p, n = 16, 2 * GB
    sent = sync.all_reduce_bytes(n, p)
    return Ask(
        f"The same {n / GB:g} GB gradient averaged over {p} workers with a ring all-reduce: how many GB does each "
        "worker send per step?",
        Number(sent / GB, rel=0.01, unit="GB"),
        f"A ring sends 2(p-1)/p x n per rank: 2 x {p - 1}/{p} x {n / GB:g} = {sent / GB:.3g} GB (and receives as "
        "much), under 2n whatever p, on every link alike. A single parameter server's link carries p x n each way "
        "instead.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def ddp_bucket_order():
    options = ("Backward produces gradients roughly from the last layer to the first, so the bucket of the last "
               "parameters fills first and its all-reduce can start while backward still runs",
               "The last layers are the largest, so their buckets pack more tightly",
               "All-reduce is faster on parameters registered late",
               "Reverse order lets the optimizer update the first layer first")
    return Ask(
        "PyTorch's DDP assigns parameters to gradient buckets in REVERSE order of model.parameters(). Why?",
        Choice(options, 0),
        "Gradients become ready in about the reverse of the forward order. Bucket 0 holds the last parameters, is "
        "complete first, and its all-reduce is posted from a gradient hook while backward computes the earlier "
        "layers (Li et al., VLDB 2020, section 3.2). In registration order, bucket 0 would hold the embedding, "
        "whose gradient comes last, and with buckets reduced in order nothing could start before backward ends.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def why_buckets_not_per_gradient():
    options = ("Each all-reduce pays a fixed latency and small messages never reach the link's bandwidth: buckets "
               "amortise both, while still starting before backward ends",
               "NCCL cannot all-reduce tensors smaller than 25 MB",
               "Per-gradient all-reduces would give a different average",
               "Buckets reduce the number of bytes each rank sends")
    return Ask(
        "Overlap could post one all-reduce per gradient, from each parameter's own hook. Why does DDP group them "
        "into buckets of about 25 MB instead?",
        Choice(options, 0),
        "In the alpha-beta model one all-reduce costs about 2(p-1) alpha + 2(p-1)/p n beta: hundreds of small ones pay "
        "the alpha term hundreds of times, and small buffers stay far below the link's bandwidth. One bucket for the "
        "whole model is the other extreme: nothing can start until the last gradient. The bucket cap is the "
        "trade-off; the bytes sent are the same either way.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def bucket_count_for_a_cap():
    from aisys.parallel import ddp
    sizes_mb = [40, 4, 12, 12, 6, 6, 30, 2]
    buckets = ddp.assign_buckets([s * MB for s in sizes_mb], 25 * MB)
    return Ask(
        f"Gradients of {', '.join(map(str, sizes_mb))} MB, in registration order. Walking them from the last to the "
        "first, a bucket closes as soon as it holds >= 25 MB. How many buckets?",
        Number(len(buckets), rel=0, abs=0.5, unit=""),
        "From the last: " + "; ".join("[" + ", ".join(f"{sizes_mb[i]}" for i in b) + f"] = "
                                      f"{sum(sizes_mb[i] for i in b)} MB" for b in buckets)
        + f": {len(buckets)} buckets. A gradient larger than the cap closes the bucket it joins; the last bucket "
        "may be smaller. (torch groups by dtype and caps its first bucket at 1 MiB as well.)")


@card(topic="parallel training", difficulty="hard", frequency="medium", page=PAGE)
def ssp_fastest_start():
    s, slowest = 3, 6
    # worker 0 is slow (10 s per iteration), worker 1 fast (1 s): the fast one runs ahead until the gate stops it
    durations = np.array([[10] * 20, [1] * 20], dtype=np.float64)
    done = sync.finish_times(durations, s)
    slow_done = done[0, slowest]  # the moment the slow worker finishes iteration `slowest`
    started = np.concatenate([[0], done[1, :-1]])  # when the fast worker started each iteration
    latest = int(np.flatnonzero(started <= slow_done).max())  # whole seconds: exact
    return Ask(
        f"Stale-synchronous parallel SGD with staleness bound s = {s}: a worker may start iteration c only once every "
        f"worker has finished iteration c - s - 1. The slowest worker has just finished iteration {slowest} "
        "(iterations count from 0). What is the highest iteration the fastest worker may have started?",
        Number(latest, rel=0, abs=0.5, unit=""),
        f"c - s - 1 <= {slowest} gives c <= {slowest} + {s} + 1 = {latest}: the fastest runs at most s iterations "
        f"ahead of the slowest's next one (Ho et al., NeurIPS 2013). s = 0 is synchronous SGD, a barrier per step; "
        "s = infinity is asynchronous (Downpour), where staleness has no bound.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def ddp_unused_parameter():
    options = ("Its bucket never completes, so that bucket's all-reduce is never posted during backward: DDP must "
               "find such parameters and reduce their bucket anyway (zeros for the missing gradient), or the ranks' "
               "collectives stop matching",
               "Its gradient is silently treated as zero and nothing else changes",
               "Only that parameter's update is skipped; its bucket is reduced as usual",
               "The all-reduce of that bucket runs twice")
    return Ask(
        "In DDP with overlap, a parameter takes no part in this step's forward (a branch not taken). Its "
        "post-accumulate-grad hook never fires. What goes wrong if nothing handles it?",
        Choice(options, 0),
        "A bucket is posted when all its gradients are ready; one that never gets a gradient keeps its bucket (and, "
        "with buckets posted in order, every later one) waiting. torch's DDP with find_unused_parameters=True walks "
        "the autograd graph after forward and marks such parameters ready; without it, the next iteration raises "
        "that the previous reduction did not finish. The reference's ddp_finish posts what is left, with zeros.")
