"""Pictures of a systolic array's trace: one cycle as text or as a drawing, and an animation that works offline.

Each PE shows what its registers hold by where the values came from: in output-stationary,
A[i,k] in register a and B[k,j] in register b and the number of products in acc; in
weight-stationary, the weight B[k,j], the activation A[m,i] and the row of C whose partial sum
passes through. Busy PEs (their multiply-add combined a matching pair) are shaded.
"""

import re

import numpy as np

from .array import BUBBLE, NAMES, REGISTERS, Trace

BUSY, IDLE, LOADING = "#c7e9c0", "#ffffff", "#f0f0f0"
COLOURS = {"a": "#1f5fa8", "x": "#1f5fa8", "b": "#c05a00", "w": "#c05a00", "acc": "#222222", "psum": "#2a7a2a"}
HEADINGS = {"a": "a (right)", "b": "b (down)", "acc": "acc (terms)", "w": "w (stays)", "x": "x (right)",
            "psum": "psum (down)"}


def _cycle(trace: Trace, t: int) -> int:
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be an aisys.systolic.array.Trace, got {type(trace).__name__}")
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < trace.cycles:
        raise ValueError(f"t must be a cycle of the trace, 0 .. {trace.cycles - 1}; got {t!r}")
    return int(t)


def label(trace: Trace, t: int, name: str, i: int, j: int, compact: bool = False) -> str:
    """What register `name` of PE(i, j) holds after cycle t, by origin: 'A[1,2]', 'C[0,3]:2', '' for a bubble."""
    sources = trace.sources[_cycle(trace, t)]
    if name == "acc":
        return str(sources["terms"][i, j])
    source = sources[name][i, j]
    if source == BUBBLE:
        return ""
    index = {"a": (i, source), "b": (source, j), "w": (source, j), "x": (source, i), "psum": (source, j)}[name]
    matrix = "C" if name == "psum" else "A" if name in ("a", "x") else "B"
    text = f"{matrix}{index[0]},{index[1]}" if compact else f"{matrix}[{index[0]},{index[1]}]"
    return f"{text}:{sources['terms'][i, j]}" if name == "psum" else text


def text(trace: Trace, t: int) -> str:
    """Cycle t of a trace as text: one grid per register, side by side ('.' for a bubble)."""
    t = _cycle(trace, t)
    names = REGISTERS[trace.dataflow]
    grids = [[[label(trace, t, name, i, j, compact=True) or "." for j in range(trace.cols)]
              for i in range(trace.rows)] for name in names]
    width = max(5, *(len(cell) for grid in grids for row in grid for cell in row))
    blocks = []
    for name, grid in zip(names, grids):
        lines = [" ".join(cell.rjust(width) for cell in row) for row in grid]
        blocks.append([HEADINGS[name].ljust(len(lines[0]))] + lines)
    busy = int(trace.busy[t].sum())
    header = (f"cycle {t} ({trace.phases[t]}): {busy} of {trace.rows * trace.cols} PEs busy "
              f"({NAMES[trace.dataflow]})")
    return "\n".join([header] + ["   ".join(parts) for parts in zip(*blocks)])


def draw(trace: Trace, t: int, ax, title: bool = True, fontsize: float = 8) -> None:
    """Draw cycle t of a trace on a matplotlib Axes: a box per PE with its registers' origins, busy PEs shaded."""
    t = _cycle(trace, t)
    from matplotlib.patches import FancyArrowPatch, Rectangle

    ax.clear()
    names = REGISTERS[trace.dataflow]
    for i in range(trace.rows):
        for j in range(trace.cols):
            fill = BUSY if trace.busy[t][i, j] else LOADING if trace.phases[t] == "load" else IDLE
            ax.add_patch(Rectangle((j + 0.06, -i - 0.94), 0.88, 0.88, facecolor=fill, edgecolor="#555555", lw=1))
            for line, name in enumerate(names):
                ax.text(j + 0.5, -i - 0.27 - 0.22 * line, label(trace, t, name, i, j) if name != "acc" else
                        f"Σ {label(trace, t, name, i, j)}", ha="center", va="center", fontsize=fontsize,
                        color=COLOURS[name])
            if j + 1 < trace.cols:  # a and x move right, b and psum down (w only while loading)
                ax.add_patch(FancyArrowPatch((j + 0.94, -i - 0.5), (j + 1.06, -i - 0.5), arrowstyle="-|>",
                                             mutation_scale=6, color="#999999", lw=0.8))
            if i + 1 < trace.rows:
                ax.add_patch(FancyArrowPatch((j + 0.5, -i - 0.94), (j + 0.5, -i - 1.06), arrowstyle="-|>",
                                             mutation_scale=6, color="#999999", lw=0.8))
    ax.set_xlim(-0.05, trace.cols + 0.05)
    ax.set_ylim(-trace.rows - 0.05, 0.05)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        busy = int(trace.busy[t].sum())
        state = "loading weights" if trace.phases[t] == "load" else f"{busy}/{trace.rows * trace.cols} busy"
        ax.set_title(f"cycle {t}: {state}", fontsize=fontsize + 1.5)


def figure(trace: Trace, cycles, columns: int = 3, size: float = 3.3):
    """A matplotlib Figure drawing the given cycles of a trace side by side, `columns` to a row."""
    import matplotlib.pyplot as plt

    cycles = [_cycle(trace, t) for t in cycles]
    if not cycles or isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"cycles must name at least one cycle and columns be an integer >= 1, got {columns!r}")
    rows = -(-len(cycles) // columns)
    width = size * trace.cols / max(trace.rows, trace.cols)
    fig, axes = plt.subplots(rows, columns, figsize=(columns * width, rows * (size + 0.3)), squeeze=False)
    for ax in axes.flat[len(cycles):]:
        ax.axis("off")
    for ax, t in zip(axes.flat, cycles):
        draw(trace, t, ax)
    fig.tight_layout()
    return fig


def animation(trace: Trace, *, size: float = 4.5, dpi: int = 80, interval: int = 700) -> str:
    """The whole trace as an HTML animation with play controls, made to be embedded in a page that works offline."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    if trace.cycles == 0:
        raise ValueError("trace must hold at least one cycle")
    fig, ax = plt.subplots(figsize=(size * trace.cols / max(trace.rows, trace.cols) + 0.2, size), dpi=dpi)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.9)
    movie = FuncAnimation(fig, lambda t: draw(trace, t, ax, fontsize=9), frames=trace.cycles, interval=interval)
    html = movie.to_jshtml(default_mode="once")
    plt.close(fig)
    return offline(html)


# matplotlib's player draws its buttons with Font Awesome, fetched from a CDN; plain characters need nothing.
_ICONS = {"fa-minus": "−", "fa-fast-backward": "⇤", "fa-step-backward": "‹", "fa-flip-horizontal": "◀",
          "fa-pause": "❚❚", "fa-play": "▶", "fa-step-forward": "›", "fa-fast-forward": "⇥", "fa-plus": "+"}


def offline(html: str) -> str:
    """matplotlib's `to_jshtml()` output without its one link to the internet (the Font Awesome stylesheet)."""
    html = re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)

    def icon(match: re.Match) -> str:
        classes = match.group(1).split()
        name = "fa-flip-horizontal" if "fa-flip-horizontal" in classes else next(c for c in classes if c != "fa")
        return _ICONS.get(name, "")

    return re.sub(r'<i class="fa ([^"]*)"></i>', icon, html)
