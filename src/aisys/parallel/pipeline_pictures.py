"""Gantt charts of pipeline schedules, drawn from the reference simulator (aisys.parallel.pipeline.simulate)."""

from aisys.parallel import pipeline


def gantt(ax, schedule, t_forward: float = 1.0, t_backward: float = 2.0, t_comm: float = 0.0, title: str = ""):
    """Draw one row per stage: forwards light, backwards dark (one hue per chunk), labelled with the micro-batch
    ("micro-batch.chunk" where there are several chunks; backwards only, forwards being too narrow then); the idle
    gaps are the bubble. Returns the simulation."""
    result = pipeline.simulate(schedule, t_forward, t_backward, t_comm)
    chunks = 1 + max(op[2] for ops in schedule for op in ops)
    colours = {"F": ["#9ecae1", "#a1d99b", "#fdae6b", "#bcbddc"], "B": ["#08519c", "#006d2c", "#a63603", "#54278f"]}
    for s, ops in enumerate(schedule):
        for (kind, i, c), begin in zip(ops, result["start"][s]):
            width = (t_forward if kind == "F" else t_backward) / chunks
            ax.broken_barh([(begin, width)], (s - 0.4, 0.8), facecolors=colours[kind][c % 4], edgecolors="white",
                           linewidth=0.5)
            label = f"{i}" if chunks == 1 else f"{i}.{c}"
            if chunks == 1 or kind == "B":  # an interleaved forward is too narrow for a label
                ax.text(begin + width / 2, s, label, ha="center", va="center", fontsize=6,
                        color="black" if kind == "F" else "white")
    p = len(schedule)
    ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_title(f"{title}: bubble {100 * result['bubble']:.1f}%, peak {result['peak']}", fontsize=9)
    return result
