"""Pictures of who holds what: ranks x blocks grids, coloured by the rank each block came from, traced from real output.

    from aisys.collectives import pictures
    fig = pictures.before_after("all_to_all", world_size=4)      # a primitive, traced from aisys's reference
    fig = pictures.before_after(my_all_to_all, world_size=4)     # or any function of the same signature

    ax = pictures.draw_holdings([[Block(0, (0,)), None], [Block(0, (0, 1)), Block(1, (1,))]], title="step 1")

`draw_holdings` draws any list of per-rank rows of `Block`s (or None for an empty slot), so an
algorithm's step-by-step figures (a ring's partial sums, a tree's forwarding) can use it too:
build the rows from the algorithm's state and call it once per step. A block is block `index`
of the original buffers, holding the data of the ranks in `sources`: one rank for a copy,
several for a reduction (drawn as stripes of their colours, hatched, and labelled with Σ).
`trace` finds the blocks a collective delivers by running it on numbers that encode their
origin, so a picture shows what the code does, not what someone drew.
"""

from dataclasses import dataclass

import numpy as np

from .._validate import nonnegative_int, one_of, positive_int

SPLITTING = ("scatter", "reduce_scatter", "all_to_all")  # their buffers are cut into one block per rank
ROOTED = ("broadcast", "scatter", "gather", "reduce")


@dataclass(frozen=True)
class Block:
    """Block `index` of the original buffers, carrying the data of the ranks in `sources` (several: reduced)."""

    index: int
    sources: tuple[int, ...]

    @property
    def reduced(self) -> bool:
        return len(self.sources) > 1

    def label(self, world_size: int) -> str:
        if not self.reduced:
            return f"b{self.index}\nr{self.sources[0]}"
        every = self.sources == tuple(range(world_size))
        return f"b{self.index}\nΣ" + ("" if every else " " + ",".join(map(str, self.sources)))


def trace(collective, world_size: int, blocks: int | None = None, root: int = 0):
    """(before, after): the Block rows of each rank when `collective` runs on `blocks` blocks per rank.

    `collective` is a name from aisys.collectives.simulated, or any function with the same
    signature (yours, in an exercise). It runs on int64 buffers in which block j of rank r
    holds j * 2**p + 2**r: a sum of copies of block j from a set of ranks keeps the set in its
    low p bits and j times their number above, so every delivered block can be read back (a
    value that is no such sum is drawn as an empty slot). Default `blocks`: p for the
    collectives that split a buffer among the ranks, else 1.
    """
    name = collective if isinstance(collective, str) else getattr(collective, "__name__", "")
    if isinstance(collective, str):
        from . import simulated  # here, not at the top: a grading kernel has draw_holdings but not the reference

        collective = getattr(simulated, one_of("collective", name, simulated.COLLECTIVES))
    elif not callable(collective):
        raise TypeError(f"collective must be a collective's name or a function, got {type(collective).__name__}")
    p = positive_int("world_size", world_size)
    if p > 30:
        raise ValueError(f"world_size must be at most 30 to be traced in int64 and drawn, got {p}")
    blocks = (p if name in SPLITTING else 1) if blocks is None else positive_int("blocks", blocks)
    buffers = [np.array([(j << p) + (1 << r) for j in range(blocks)], dtype=np.int64) for r in range(p)]
    kwargs = {"root": nonnegative_int("root", root)} if name in ROOTED else {}
    after = collective([b.copy() for b in buffers], **kwargs)  # op "sum", the default, keeps the sources readable
    return [decode(buffer, p) for buffer in buffers], [decode(np.asarray(buffer), p) for buffer in after]


def decode(buffer: np.ndarray, p: int) -> list[Block | None]:
    """The blocks a buffer in `trace`'s encoding holds (block j of rank r is j * 2**p + 2**r); None where
    an element is no sum of such blocks. ring_pictures reads its snapshots with it too."""
    row = []
    for value in np.asarray(buffer, dtype=np.int64).ravel().tolist():
        sources = tuple(r for r in range(p) if value >> r & 1)
        high = value >> p
        readable = value > 0 and sources and high % len(sources) == 0
        row.append(Block(high // len(sources), sources) if readable else None)
    return row


def rank_colors(world_size: int) -> list:
    """One colour per rank (matplotlib's tab10, then tab20 beyond ten ranks)."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10" if world_size <= 10 else "tab20")
    return [cmap(r % cmap.N) for r in range(world_size)]


def draw_holdings(holdings, *, ax=None, title: str | None = None, world_size: int | None = None, columns=None):
    """Draw one row per rank, one cell per Block it holds (None: an empty slot), and return the axes.

    A copied block is filled with its source rank's colour; a reduced one with stripes of
    every source's colour, hatched and labelled Σ (with the contributing ranks when they are
    not all of them). `world_size` fixes the colours when the rows are fewer than the ranks;
    `columns` fixes the width, so that the panels of one figure line up.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows = [list(row) for row in holdings]
    p = world_size or len(rows)
    colors = rank_colors(p)
    width = columns or max((len(row) for row in rows), default=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.7 * width + 1, 0.55 * len(rows) + 0.6))
    for rank, row in enumerate(rows):
        y = len(rows) - 1 - rank  # rank 0 on top
        for column, block in enumerate(row):
            if block is None:
                ax.add_patch(Rectangle((column, y), 1, 1, fill=False, linestyle=":", edgecolor="0.6"))
                continue
            stripe = 1 / len(block.sources)
            for k, source in enumerate(block.sources):
                ax.add_patch(Rectangle((column + k * stripe, y), stripe, 1, facecolor=colors[source],
                                       edgecolor="none", alpha=0.85))
            ax.add_patch(Rectangle((column, y), 1, 1, fill=False, edgecolor="white", linewidth=2,
                                   hatch="///" if block.reduced else None))
            ax.text(column + 0.5, y + 0.5, block.label(p), ha="center", va="center", fontsize=8,
                    fontweight="bold" if block.reduced else "normal", color="black",
                    bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1} if block.reduced
                    else None)
    ax.set_xlim(0, width)
    ax.set_ylim(0, len(rows))
    ax.set_yticks([len(rows) - 0.5 - r for r in range(len(rows))], [f"rank {r}" for r in range(len(rows))])
    ax.set_xticks([])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def before_after(collective, world_size: int, blocks: int | None = None, root: int = 0):
    """A figure of two panels, who holds what before and after `collective` (a name or a function; see `trace`)."""
    import matplotlib.pyplot as plt

    before, after = trace(collective, world_size, blocks, root)
    columns = max(len(row) for row in before + after)
    fig, axes = plt.subplots(1, 2, figsize=(2 * (0.62 * columns + 1.2), 0.5 * world_size + 0.8))
    name = collective if isinstance(collective, str) else getattr(collective, "__name__", "")
    where = f" (root {root})" if name in ROOTED else ""
    draw_holdings(before, ax=axes[0], title="before", columns=columns)
    draw_holdings(after, ax=axes[1], title=f"after {name}{where}", columns=columns)
    fig.tight_layout()
    return fig
