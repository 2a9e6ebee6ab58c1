"""A measured timeline of one DDP step: when each gradient is ready, when each bucket's all-reduce is posted and done.

    runs = measure(world_size=2)          # {"overlapped": [rank 0's events, ...], "after_backward": [...]}
    figure(runs)                          # rank 0's step, both ways, on one time axis

Each rank trains the same MLP (`layers` Linear layers of width x width, float32) on its own
random batch, a few steps, and keeps the events of its last step, in seconds from the start of
its backward: "grad" (a parameter's gradient accumulated: a post-accumulate-grad hook of the
measurement's own, registered before DDP's), "posted" and "done" for each all-reduce
(aisys.parallel.ddp's log: posted when the call returns, done when gloo's thread completes the
request's future) and "backward_end". "overlapped" is aisys.parallel.ddp (buckets posted from
the hooks); "after_backward" is the naive scheme of Li et al. (VLDB 2020, section 3.2.1): one
all-reduce of every gradient, flattened, once backward has ended. Gloo on this CPU: the times
say how the scheme orders the work, not how fast a GPU and NCCL do it.
"""

import time

import torch
import torch.distributed as dist

from .._validate import one_of, positive_int
from ..collectives.launch import run_ranks
from . import ddp

SCHEMES = ("overlapped", "after_backward")


def _model(layers: int, width: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    params = []
    for _ in range(layers):
        params.append((torch.randn(width, width, generator=generator) / width**0.5).requires_grad_())
        params.append(torch.zeros(width).requires_grad_())
    return params


def _forward(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    for i in range(0, len(params), 2):
        x = torch.relu(x @ params[i] + params[i + 1])
    return x.square().mean()


def _on_rank(scheme: str, layers: int, width: int, batch: int, cap_bytes: int, steps: int) -> list[tuple]:
    params = _model(layers, width)
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    clock = {"start": 0.0}
    events: list[tuple] = []
    for index, param in enumerate(params):
        param.register_post_accumulate_grad_hook(
            lambda _p, index=index: events.append(("grad", index // 2, 0, time.perf_counter())))
    log: list[tuple] = []
    state = ddp.ddp_attach(params, cap_bytes, log=log) if scheme == "overlapped" else None
    for _ in range(steps):
        events.clear()
        log.clear()
        for param in params:
            param.grad = None
        value = _forward(params, torch.randn(batch, width, generator=generator))
        dist.barrier()
        clock["start"] = time.perf_counter()
        value.backward()
        events.append(("backward_end", -1, 0, time.perf_counter()))
        if state is not None:
            ddp.ddp_finish(state)
        else:
            flat = torch.cat([p.grad.flatten() for p in params])
            work = dist.all_reduce(flat, async_op=True)
            log.append(("posted", 0, flat.numel() * flat.element_size(), time.perf_counter()))
            work.wait()
            log.append(("done", 0, flat.numel() * flat.element_size(), time.perf_counter()))
            flat.div_(dist.get_world_size())
        events.append(("finished", -1, 0, time.perf_counter()))
    return [{"kind": kind, "index": index, "bytes": nbytes, "t": t - clock["start"]}
            for kind, index, nbytes, t in sorted(events + log, key=lambda event: event[3])]


def measure(world_size: int = 2, layers: int = 8, width: int = 384, batch: int = 16, cap_bytes: int = 2**20,
            steps: int = 3, schemes=SCHEMES) -> dict:
    """Per scheme, each rank's events of its last step (kind, index: layer or bucket, bytes, t in seconds)."""
    world_size, layers = positive_int("world_size", world_size), positive_int("layers", layers)
    width, batch = positive_int("width", width), positive_int("batch", batch)
    cap_bytes, steps = positive_int("cap_bytes", cap_bytes), positive_int("steps", steps)
    return {one_of("scheme", scheme, SCHEMES): run_ranks(_on_rank, world_size,
                                                          [(scheme, layers, width, batch, cap_bytes, steps)]
                                                          * world_size, timeout=60, wall_timeout=120)
            for scheme in schemes}


def summary(events: list[dict]) -> dict:
    """Seconds from backward's start to its end and to the step's end, and the share of all-reduce time (posted to
    done, summed over buckets) that lies before backward ended."""
    end = next(e["t"] for e in events if e["kind"] == "backward_end")
    finished = next(e["t"] for e in events if e["kind"] == "finished")
    posted = {e["index"]: e["t"] for e in events if e["kind"] == "posted"}
    done = {e["index"]: e["t"] for e in events if e["kind"] == "done"}
    total = sum(done[b] - posted[b] for b in posted)
    hidden = sum(max(0.0, min(done[b], end) - posted[b]) for b in posted)
    return {"backward": end, "step": finished, "buckets": len(posted), "hidden": hidden / total if total else 0.0}


def figure(runs: dict, rank: int = 0):
    """Rank `rank`'s step under each scheme: gradient-ready ticks, one bar per all-reduce (posted to done)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.4 + 1.3 * len(runs)), sharex=True, squeeze=False)
    for ax, (scheme, per_rank) in zip(axes[:, 0], runs.items()):
        events = per_rank[rank]
        grads = [e for e in events if e["kind"] == "grad"]
        ax.vlines([e["t"] * 1e3 for e in grads], 1.6, 2.4, color="tab:blue", lw=1.5, label="gradient ready")
        posted = {e["index"]: e for e in events if e["kind"] == "posted"}
        done = {e["index"]: e for e in events if e["kind"] == "done"}
        for b, start in posted.items():
            stop = done[b]["t"] if b in done else start["t"]
            label = "all-reduce (posted → done)" if b == 0 else None
            ax.barh(0.9 - 0.25 * (b % 3), (stop - start["t"]) * 1e3, left=start["t"] * 1e3, height=0.2,
                    color="tab:orange", edgecolor="black", lw=0.5, label=label)
        end = next(e["t"] for e in events if e["kind"] == "backward_end")
        ax.axvline(end * 1e3, color="black", ls="--", lw=1, label="backward ends")
        ax.set_yticks([0.65, 2.0], ["all-reduce", "gradients"])
        ax.set_ylim(0, 2.8)
        ax.set_title(f"{scheme.replace('_', ' ')}: rank {rank}", fontsize=10, loc="left")
        ax.legend(loc="upper right", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("ms since backward started")
    fig.tight_layout()
    return fig
