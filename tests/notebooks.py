"""Test helpers: run an exercise notebook's code in this process and grade it with the registered checks."""

from pathlib import Path

import linecache

import nbformat

from aisys_grader import InProcessStudent, checks_for, run
from aisys_grader.exercise import exercise_ids

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


def namespace(path: Path, extra_code: str = "") -> dict:
    """Globals after running every ungraded code cell of a notebook, then `extra_code`.

    Like a kernel asked to run all cells, a cell that raises does not stop the rest.
    """
    notebook = nbformat.read(path, as_version=4)
    scope = {"__name__": "__main__", "In": [""]}  # IPython's input history: what the clean room runs again
    for cell in notebook.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade"):
            scope["In"].append(cell.source)
            try:
                _run(cell.source, f"<{path.name}:{cell.id}>", scope)
            except Exception:
                pass
    scope["In"].append(extra_code)
    _run(extra_code, f"<{path.name}:extra>", scope)
    return scope


def grade(exercise: str, scope: dict, *, hidden: bool, seed: int | None = None) -> dict:
    """Result of every check of `exercise` against the functions in `scope`, by check name."""
    student = InProcessStudent(scope, exercise)
    return {name: run(check, student, hidden=hidden, seed=seed) for name, check in checks_for(exercise).items()}
