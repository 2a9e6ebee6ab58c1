"""Test helpers: run an exercise notebook's code in this process and grade it with the registered checks."""

import linecache
from pathlib import Path

import jupytext
import nbformat
from aisys_grader import InProcessStudent, checks_for, run
from aisys_grader.exercise import exercise_ids
from aisys_grader.wrong import Answer, wrong_program

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = exercise_ids()


def student_notebook(exercise: str) -> Path:
    return ROOT / "exercises" / f"{exercise}.ipynb"


def source_notebook(exercise: str) -> Path:
    return ROOT / "autograder" / "source" / f"{exercise}.ipynb"


def graded_cells(path: Path) -> list[str]:
    """Check names of a notebook's graded cells, in order."""
    notebook = nbformat.read(path, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in notebook.cells
            if c.metadata.get("nbgrader", {}).get("grade")]


def _run(code: str, filename: str, scope: dict) -> None:
    """exec `code`, keeping its source readable by `inspect` as IPython does (the SIMT simulator reads kernels)."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    exec(compile(code, filename, "exec"), scope)


def namespace(path: Path | nbformat.NotebookNode, extra_code: str = "", name: str = "") -> dict:
    """Globals after running every ungraded code cell of a notebook (a file, or one named `name`), then
    `extra_code`.

    Like a kernel asked to run all cells, a cell that raises does not stop the rest.
    """
    notebook = path if isinstance(path, nbformat.NotebookNode) else nbformat.read(path, as_version=4)
    name = name or path.name
    scope = {"__name__": "__main__", "In": [""]}  # IPython's input history: what the clean room runs again
    for cell in notebook.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
            scope["In"].append(cell.source)
            try:
                _run(cell.source, f"<{name}:{cell.id}>", scope)
            except Exception:
                pass
    scope["In"].append(extra_code)
    _run(extra_code, f"<{name}:extra>", scope)
    return scope


def wrong_notebook(exercise: str, answer: Answer, source: Path | None = None) -> nbformat.NotebookNode:
    """The nbgrader source notebook of `exercise` (at `source`, default the repository's) with a known-wrong
    answer's edits in its cells."""
    notebook = nbformat.read(source or source_notebook(exercise), as_version=4)
    edited = jupytext.reads(wrong_program(exercise, answer), fmt="py:percent").cells
    assert len(edited) == len(notebook.cells), f"{exercise}:{answer.name}: the edits add or remove cells"
    for cell, source in zip(notebook.cells, edited):
        cell.source = source.source
    return notebook


def wrong_namespace(exercise: str, answer: Answer, source: Path | None = None) -> dict:
    """Globals of the wrong answer's notebook run as a student's would (then of its code, if any)."""
    return namespace(wrong_notebook(exercise, answer, source), extra_code=answer.code,
                     name=f"{exercise}:{answer.name}")


def grade(exercise: str, scope: dict, *, hidden: bool, seed: int | None = None, only=None) -> dict:
    """Result of every check of `exercise` (or of those named in `only`) against the functions in `scope`, by
    check name."""
    student = InProcessStudent(scope, exercise)
    return {name: run(check, student, hidden=hidden, seed=seed) for name, check in checks_for(exercise).items()
            if only is None or name in only}
