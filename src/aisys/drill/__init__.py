"""Interview drills: timed coding problems and concept cards, checked offline, with a history and spaced repetition.

The bank (bank.py) holds two kinds of item: coding drills, which are exercises with a [drill] table in their
spec.toml (solutions/<chapter>/<name>/, graded by the same engine as every exercise), and concept cards
(card.py, written in cards/), whose answers are computed from aisys. `aisys drill` (cli.py) and the `%drill`
magic (magic.py) are two front ends over the same functions; the history lives in SQLite (store.py) and the
schedule is FSRS's (schedule.py).
"""


def load_ipython_extension(ipython):
    """`%load_ext aisys.drill`: the %drill magics (magic.py)."""
    from .magic import load_ipython_extension as load
    load(ipython)
