"""Step-by-step pictures of the ring all-reduce, traced from a real run of aisys.collectives.ring on p processes.

    frames = trace(4)          # [(title, rows)]: before, each reduce-scatter step, each all-gather step
    fig = figure(4)            # every frame, one panel each
    html = animation(4)        # the same frames as an offline HTML animation

Each rank runs the reference `ring.all_reduce` on a tensor of p int64 elements, one per chunk, in
which chunk j of rank r holds j * 2**p + 2**r: a sum of copies of chunk j keeps in its low p bits
the set of ranks that contributed (aisys.collectives.pictures' encoding), so the picture of each
step is read back from what the ranks really hold, drawn with pictures.draw_holdings.
"""

from .._validate import positive_int
from . import pictures


def trace(world_size: int = 4) -> list[tuple[str, list]]:
    """(title, per-rank rows of Blocks) before the ring and after each of its 2(p - 1) steps."""
    from .launch import run_ranks

    p = positive_int("world_size", world_size)
    if p > 16:
        raise ValueError(f"world_size must be at most 16 to be drawn, got {p}")
    snapshots = run_ranks(_snapshots_on_rank, p)  # per rank: its tensor before and after each step
    titles = ["before"] + [f"reduce-scatter step {s + 1}" for s in range(p - 1)] + \
        [f"all-gather step {s + 1}" for s in range(p - 1)]
    return [(title, [pictures.decode(snapshots[rank][i], p) for rank in range(p)])
            for i, title in enumerate(titles)]


def _snapshots_on_rank() -> list:
    import torch
    import torch.distributed as dist

    from . import ring

    rank, p = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([(j << p) + (1 << rank) for j in range(p)], dtype=torch.int64)
    snapshots = [tensor.numpy().copy()]
    ring.all_reduce(tensor, on_step=lambda phase, step: snapshots.append(tensor.numpy().copy()))
    return snapshots


def figure(world_size: int = 4):
    """Every frame of `trace` as one panel: the reduce-scatter on the first row, the all-gather on the second."""
    import matplotlib.pyplot as plt

    frames = trace(world_size)
    p = positive_int("world_size", world_size)
    fig, axes = plt.subplots(2, p, figsize=(p * (0.62 * p + 1.1), 2 * (0.5 * p + 0.9)), squeeze=False)
    panels = [frames[:p], frames[p:] + [None]]  # before + p - 1 steps; p - 1 steps and an empty corner
    for row, row_frames in zip(axes, panels):
        for ax, frame in zip(row, row_frames):
            if frame is None:
                ax.axis("off")
                continue
            title, holdings = frame
            pictures.draw_holdings(holdings, ax=ax, title=title, world_size=p, columns=p)
    fig.tight_layout()
    return fig


def animation(world_size: int = 4, *, interval: int = 1200) -> str:
    """The frames of `trace` as an HTML animation with play controls that works offline."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    from ..systolic.pictures import offline

    frames = trace(world_size)
    p = positive_int("world_size", world_size)
    fig, ax = plt.subplots(figsize=(0.8 * p + 1.4, 0.55 * p + 0.8), dpi=80)

    def draw(i):
        ax.clear()
        title, holdings = frames[i]
        pictures.draw_holdings(holdings, ax=ax, title=title, world_size=p, columns=p)

    movie = FuncAnimation(fig, draw, frames=len(frames), interval=interval)
    html = movie.to_jshtml(default_mode="once")
    plt.close(fig)
    return offline(html)
