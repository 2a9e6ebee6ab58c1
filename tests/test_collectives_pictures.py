"""Who-holds-what pictures: traced from the reference's output, drawable for any rows of blocks."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from aisys.collectives import pictures, simulated
from aisys.collectives.pictures import Block


def test_trace_reads_back_copies_and_reductions():
    before, after = pictures.trace("all_to_all", 3)
    assert before[1] == [Block(0, (1,)), Block(1, (1,)), Block(2, (1,))]
    assert after[2] == [Block(2, (0,)), Block(2, (1,)), Block(2, (2,))]
    _, after = pictures.trace("reduce_scatter", 4)
    assert after == [[Block(r, (0, 1, 2, 3))] for r in range(4)]
    _, after = pictures.trace("gather", 3, root=2)
    assert after[2] == [Block(0, (0,)), Block(0, (1,)), Block(0, (2,))] and after[0] == [Block(0, (0,))]


def test_trace_takes_a_function_and_shows_what_it_cannot_read_as_empty():
    def all_to_all(buffers):
        return [np.zeros_like(b) for b in buffers]

    _, after = pictures.trace(all_to_all, 2)
    assert after == [[None, None], [None, None]]
    assert pictures.trace(simulated.all_reduce, 2)[1] == [[Block(0, (0, 1))]] * 2


def test_draws_every_primitive_and_ragged_rows_with_empty_slots():
    for name in simulated.COLLECTIVES:
        fig = pictures.before_after(name, 3, root=1)
        assert len(fig.axes) == 2
    ax = pictures.draw_holdings([[Block(0, (0,)), None], [Block(1, (0, 1))]], title="step", world_size=4)
    assert ax.get_title() == "step" and len(ax.texts) == 2
    assert Block(1, (0, 1)).label(4) == "b1\nΣ 0,1" and Block(1, (0, 1)).label(2) == "b1\nΣ"


@pytest.mark.parametrize("call, argument", [
    (lambda: pictures.trace("allreduce", 3), "collective"),
    (lambda: pictures.trace(3, 3), "collective"),
    (lambda: pictures.trace("broadcast", 0), "world_size"),
    (lambda: pictures.trace("broadcast", 31), "world_size"),
    (lambda: pictures.trace("broadcast", 3, blocks=0), "blocks"),
    (lambda: pictures.trace("broadcast", 3, root=3), "root"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises((ValueError, TypeError), match=argument):
        call()
