"""The files a learner works in: a drill's solution cell as a Python file, or the drill's whole notebook."""

import copy
from pathlib import Path

from .bank import Item
from .grading import handout, solution_cells

SETUP_ONLY = ("aisys_grader", "checker(")  # lines of the setup cell that only bind the notebook's own checks


def _without_checker(source: str) -> list[str]:
    """A code cell's lines less those that bind the notebook's own checks."""
    return [line for line in source.splitlines() if not any(s in line for s in SETUP_ONLY)]


def setup_code(notebook) -> str:
    """A drill notebook's setup cell, less the lines that bind the notebook's own checks (its imports)."""
    return "\n".join(_without_checker(next(c.source for c in notebook.cells if c.cell_type == "code")))


def solution(item: Item) -> str:
    """The drill's solution cell, from its nbgrader source notebook: the answer key, for the book's worked drills,
    the benchmark and the tests, never for a learner's file."""
    import nbformat
    from aisys_grader.exercise import course_root
    notebook = nbformat.read(course_root().parent / "autograder" / "source" / f"{item.exercise}.ipynb", as_version=4)
    return solution_cells(notebook)[0].source


def python_file(item: Item) -> str:
    """The drill as a Python file: its statement as comments, the setup's imports, and the function to write."""
    notebook = handout(item)
    lines = [f"# Drill {item.id}: {item.title}", f"# Check it: aisys drill check {item.id}   "
             f"Hints: aisys drill hint {item.id}   Budget: {item.budget_minutes} min", "#"]
    solution = solution_cells(notebook)[0]
    for cell in notebook.cells:
        if cell is solution:
            lines += ["", cell.source.rstrip(), ""]
        elif cell.cell_type == "markdown":
            lines += [("# " + line).rstrip() for line in cell.source.splitlines()] + ["#"]
        elif not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            lines += _without_checker(cell.source)
    text = "\n".join(lines).rstrip() + "\n"
    while "\n\n\n\n" in text:  # at most two blank lines, as PEP 8 puts between functions
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text


def notebook_file(item: Item) -> str:
    """The drill's notebook as handed out (its check cells run the visible checks in the learner's kernel)."""
    import nbformat
    return nbformat.writes(copy.deepcopy(handout(item)))


def write(item: Item, path: Path, *, notebook: bool, force: bool) -> bool:
    """Write the attempt file unless one is there already (a learner's work is never overwritten without
    `force`); whether it was written."""
    path = Path(path)
    if path.exists() and not force:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook_file(item) if notebook else python_file(item))
    return True


def default_path(item: Item, notebook: bool, folder: Path = Path(".")) -> Path:
    return Path(folder) / f"drill_{item.id}.{'ipynb' if notebook else 'py'}"

