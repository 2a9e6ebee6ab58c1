"""The drills in JupyterLab: `%load_ext aisys.drill`, then

    %drill list --topic attention      any `aisys drill` command, with the same history
    %drill next                        take the item due first: its clock starts, and a cell to answer in
                                       appears below, headed `%%drill <id>`
    %%drill iou                        check this cell as the attempt of drill `iou` (for a card: the answer)
"""

import shlex
import time

from . import bank, cli, files, schedule
from .store import History


def drill(line: str, cell: str | None = None) -> None:
    argv = shlex.split(line)
    if cell is not None:
        if not argv:
            raise ValueError("%%drill: name the item, as %%drill iou")
        cli.main(["check", *argv], code=cell)
        return
    if argv[:1] == ["next"]:
        _next(argv)
        return
    cli.main(argv)


def _next(argv: list[str]) -> None:
    """`next`, with the answer cell put below instead of a file written."""
    args = cli.parser().parse_args(argv)
    with History() as history:
        item = (bank.find_item(args.id) if args.id
                else cli.pick(bank.select(**cli._filters(args)), history, schedule.now()))
        if item is None:
            print("nothing to take: every item matching these filters has an open attempt")
            return
        if item.kind == "code":
            history.start(item.id, "code", item.budget_minutes, time.time())
            text = files.python_file(item)
            print(f"{item.id}: {item.title}; budget {item.budget_minutes} min, the clock runs. Write your answer "
                  f"in the cell below and run it to check it.")
        else:
            cli._take(item, history, print, path=None, notebook=False, force=False)
            text = "# your answer (a number, a letter, or letters):\n"
    from IPython import get_ipython
    get_ipython().set_next_input(f"%%drill {item.id}\n{text}", replace=False)


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(drill, "line_cell", "drill")
