"""Regenerate every exercise's notebooks from its one source, solutions/<chapter>/<name>/notebook.py.

    solutions/<chapter>/<name>/notebook.py    the source (jupytext percent format), written by hand
    autograder/source/<chapter>/<name>.ipynb  nbgrader's source notebook: solutions and hidden checks in
    exercises/<chapter>/<name>.ipynb       the student's notebook, stripped by nbgrader generate_assignment

In the source, a cell tagged "solution" holds regions between `### BEGIN SOLUTION`
and `### END SOLUTION` that the student writes; a cell tagged "check" is a graded
cell that calls `check("<name>")` for one registered check (hidden cases between
`### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS`); every other cell is locked.
Points come from the check registry, so they are written once.
"""

import ast
import tempfile
from pathlib import Path

import jupytext
import nbformat
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config, PyFileConfigLoader

from .checks import checks_for
from .exercise import course_root, exercise_ids, find


def repository() -> Path:
    """The checkout (or course folder) holding solutions/, exercises/ and autograder/."""
    return course_root().parent


def _check_name(cell, exercise: str) -> str:
    """The one check a graded cell calls, e.g. 'gemm_cost' for `check("gemm_cost")`."""
    calls = [node for node in ast.walk(ast.parse(cell.source))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check"]
    names = {c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)}
    if len(calls) == 0 or len(names) != 1:
        raise ValueError(f"{exercise}: a cell tagged 'check' must call check(\"<name>\") for one check name; "
                         f"this one calls {sorted(names) or 'none'}:\n{cell.source}")
    return names.pop()


def source_notebook(exercise: str) -> nbformat.NotebookNode:
    """The nbgrader source notebook of `exercise`, with nbgrader metadata from the cell tags."""
    notebook = jupytext.read(find(exercise).notebook)
    checks = checks_for(exercise)
    graded = []
    for i, cell in enumerate(notebook.cells):
        tags = set(cell.metadata.get("tags", []))
        meta = {"grade": False, "locked": True, "schema_version": 3, "solution": False, "task": False}
        if "solution" in tags:
            meta.update(grade_id=f"answer-{i:02d}", locked=False, solution=True)
        elif "check" in tags:
            name = _check_name(cell, exercise)
            if name not in checks:
                raise ValueError(f"{exercise}: cell {i} calls check {name!r}, which is not registered; "
                                 f"registered: {', '.join(checks)}")
            meta.update(grade_id=name, grade=True, points=checks[name].points)
            graded.append(name)
        else:
            meta["grade_id"] = f"cell-{i:02d}"
        cell.metadata = {"nbgrader": meta}
        cell.id = meta["grade_id"]  # stable ids keep the generated files reproducible
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if sorted(graded) != sorted(checks):
        raise ValueError(f"{exercise}: every registered check needs exactly one graded cell; "
                         f"cells: {sorted(graded)}, registered: {sorted(checks)}")
    notebook.metadata = {"kernelspec": notebook.metadata["kernelspec"], "language_info": {"name": "python"}}
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    return notebook


def nbgrader_config(course: Path) -> Config:
    """The nbgrader_config.py of `course` (of this repository's course if it has none), rooted at `course`."""
    folder = course if (Path(course) / "nbgrader_config.py").exists() else repository() / "autograder"
    config = PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
    config.CourseDirectory.root = str(course)
    return config


def _write(notebook, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(notebook)
    path.write_text(nbformat.writes(notebook) + "\n")
    return path


def generate(out: Path | None = None, only: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Write the nbgrader source and student notebook of every exercise in `root` (default: the course), or of
    those in `only` (as '<chapter>/<name>'), under `out` (default: the repository)."""
    out = repository() if out is None else Path(out)
    exercises = exercise_ids(root)
    unknown = sorted(set(only or ()) - set(exercises))
    if unknown:
        raise ValueError(f"only: no exercise {', '.join(unknown)}; exercises are '<chapter>/<name>' with a source "
                         f"folder in {root or course_root()}, e.g. {', '.join(exercises[:3]) or 'none'}")
    exercises = [e for e in exercises if only is None or e in only]
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        course = Path(scratch)  # a throwaway course: nbgrader writes its release folder here
        for exercise in exercises:
            source = _write(source_notebook(exercise), out / "autograder" / "source" / f"{exercise}.ipynb")
            _write(nbformat.read(source, as_version=4), course / "source" / f"{exercise}.ipynb")
            written.append(source)
        config = nbgrader_config(course)
        config.GenerateAssignment.no_database = True
        config.SaveCells.enabled = False
        api = NbGraderAPI(config=config)
        for chapter in sorted({exercise.split("/")[0] for exercise in exercises}):
            result = api.generate_assignment(chapter, force=True)
            if not result["success"]:
                raise RuntimeError(f"nbgrader generate_assignment {chapter} failed:\n"
                                   f"{result['log']}{result.get('error', '')}")
        for exercise in exercises:
            student = nbformat.read(course / "release" / f"{exercise}.ipynb", as_version=4)
            written.append(_write(student, out / "exercises" / f"{exercise}.ipynb"))
    return written
