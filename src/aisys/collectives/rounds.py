"""The rounds of a collective algorithm, found in the messages its ranks really posted, and a picture of them.

    messages = rounds.record(tree.recursive_doubling_all_reduce, world_size=8)   # run on 8 real ranks
    fig = rounds.draw(rounds.assign(messages), world_size=8)                    # who sends to whom, per round

A message's round is the length of the longest chain of messages that must happen before it
arrives: a rank's send comes one round after the latest message it had received, and after its
own previous send (one link, one message at a time). So recursive doubling on 8 ranks shows 3
rounds, a binomial-tree all-reduce 6, a ring all-reduce 14, whatever the order of the printout.
"""

from .._validate import positive_int


def record(function, world_size: int, numel: int = 8, args: tuple = ()) -> list[list[tuple[str, int, int]]]:
    """Run function(tensor, *args) on `world_size` real ranks (gloo); each rank's messages as (kind, peer, numel)."""
    from . import launch

    world_size, numel = positive_int("world_size", world_size), positive_int("numel", numel)
    return launch.run_ranks(_recorded, world_size, [(function, numel, args)] * world_size)


def _recorded(function, numel, args):
    import torch
    import torch.distributed as dist

    from . import traffic

    tensor = torch.full((numel,), float(dist.get_rank()))
    with traffic.record(allow_collectives=True) as log:  # a size check before the algorithm may use a collective
        function(tensor, *args)
    return [(m.kind, m.peer, m.numel) for m in log.messages]


def assign(messages: list[list[tuple[str, int, int]]]) -> list[list[tuple[int, int, int]]]:
    """Group the messages into rounds: a list of rounds, each a list of (sender, receiver, numel).

    `messages[rank]` lists that rank's sends and receives in the order it posted them, as
    (kind 'send' or 'recv', peer, numel); the k-th send from a to b is the k-th receive at b from a.
    ValueError if a receive has no matching send (or comes from any source, peer -1).
    """
    p = len(messages)
    arrival: dict[tuple[int, int, int], int] = {}  # (sender, receiver, k) -> round
    sends: dict[tuple[int, int], int] = {}
    receives: dict[tuple[int, int], int] = {}
    received = [0] * p  # the latest round of a message each rank has received
    last_send = [0] * p
    position = [0] * p
    progress = True
    while progress:
        progress = False
        for rank in range(p):
            while position[rank] < len(messages[rank]):
                kind, peer, _ = messages[rank][position[rank]]
                if kind == "send":
                    k = sends.get((rank, peer), 0)
                    sends[rank, peer] = k + 1
                    last_send[rank] = arrival[rank, peer, k] = max(received[rank], last_send[rank]) + 1
                else:
                    k = receives.get((peer, rank), 0)
                    if (peer, rank, k) not in arrival:
                        break  # its sender has not posted it yet: come back to this rank later
                    receives[peer, rank] = k + 1
                    received[rank] = max(received[rank], arrival[peer, rank, k])
                position[rank] += 1
                progress = True
    stuck = [r for r in range(p) if position[r] < len(messages[r])]
    if stuck:
        kind, peer, _ = messages[stuck[0]][position[stuck[0]]]
        raise ValueError(f"rank {stuck[0]} posted a receive from rank {peer} that no send matches")
    numel = {}
    for rank in range(p):
        counts: dict[int, int] = {}
        for kind, peer, size in messages[rank]:
            if kind == "send":
                numel[rank, peer, counts.get(peer, 0)] = size
                counts[peer] = counts.get(peer, 0) + 1
    rounds: list[list[tuple[int, int, int]]] = [[] for _ in range(max(arrival.values(), default=0))]
    for (sender, receiver, k), r in sorted(arrival.items()):
        rounds[r - 1].append((sender, receiver, numel[sender, receiver, k]))
    return rounds


def draw(rounds: list[list[tuple[int, int, int]]], world_size: int, *, title: str = "", columns: int | None = None):
    """One panel per round: the ranks on a circle, an arrow from sender to receiver labelled with its elements."""
    import matplotlib.pyplot as plt
    import numpy as np

    world_size = positive_int("world_size", world_size)
    count = max(len(rounds), 1)
    columns = columns or min(count, 7)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.9 * columns, 2.1 * rows), squeeze=False)
    angle = np.pi / 2 - 2 * np.pi * np.arange(world_size) / world_size  # rank 0 at the top, clockwise
    xy = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    for index, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if index >= len(rounds):
            continue
        ax.set_xlim(-1.35, 1.35)
        ax.set_ylim(-1.35, 1.35)
        ax.set_aspect("equal")
        ax.scatter(xy[:, 0], xy[:, 1], s=260, color="#dde6f3", edgecolor="#3b5b8c", zorder=2)
        for rank, (x, y) in enumerate(xy):
            ax.text(x, y, str(rank), ha="center", va="center", fontsize=8, zorder=3)
        for sender, receiver, _ in rounds[index]:
            ax.annotate("", xy=xy[receiver], xytext=xy[sender], zorder=1,
                        arrowprops=dict(arrowstyle="-|>", color="#c0392b", lw=1.2, shrinkA=9, shrinkB=9,
                                        connectionstyle="arc3,rad=0.15"))
        sizes = sorted({numel for *_, numel in rounds[index]})
        ax.set_title(f"round {index + 1}: {len(rounds[index])} msg" + (f", {sizes[0]} el." if len(sizes) == 1 else ""),
                     fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
