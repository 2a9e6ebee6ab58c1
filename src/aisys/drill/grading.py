"""Checking a coding drill's attempt: the same engine that grades every exercise notebook, run on the attempt.

An attempt is the file `aisys drill next` wrote: a Python file (the drill's solution cell, which the learner
fills in) or the drill's notebook. It runs in the grading sandbox (bubblewrap) where the machine has it, else
in a child process: either way a kernel of its own, with time limits, so an attempt that does not import, hangs,
or prints megabytes ends as a failed check with a message, never as a crash of the command. Each check draws
fresh hidden cases (its seed is recorded), so passing is about the problem, not about one set of cases."""

import copy
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from .bank import Item

TIMEOUTS = dict(cell=30, call=20, notebook=120)  # seconds: a drill's cases are small
SHOWN_OUTPUT = 2000  # characters of what the attempt printed or raised that a report quotes


@dataclass
class Outcome:
    passed: bool
    score: float
    max_score: float
    failing: str | None  # the first check that failed: its name and message
    raised: list[str] = field(default_factory=list)  # errors the attempt's own code raised, as the kernel saw them
    notes: list[str] = field(default_factory=list)  # what the engine noted (no sandbox, a dead kernel, ...)
    skipped: list[str] = field(default_factory=list)  # checks that need what this machine lacks (a GPU)
    seed: int = 0
    seconds: float = 0.0


def handout(item: Item):
    """The drill's notebook as handed out (exercises/<chapter>/<name>.ipynb)."""
    import nbformat
    from aisys_grader.exercise import course_root
    return nbformat.read(course_root().parent / "exercises" / f"{item.exercise}.ipynb", as_version=4)


def solution_cells(notebook) -> list:
    return [c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def submission(notebook, path: Path):
    """The attempt as a notebook for the engine: a notebook file as it is (None if it does not decode), or a
    Python file put in the place of the solution cell of `notebook`, the drill's handout."""
    import nbformat
    data = Path(path).read_bytes()
    if Path(path).suffix == ".ipynb":
        try:
            return nbformat.reads(data.decode("utf-8", errors="replace"), as_version=4)
        except Exception:
            return None
    notebook = copy.deepcopy(notebook)
    solution_cells(notebook)[0].source = data.decode("utf-8", errors="replace")
    return notebook


def check_code(item: Item, path: Path, *, seed: int | None = None) -> Outcome:
    """Grade the attempt in `path` on every check of the drill, visible and hidden."""
    from aisys_grader.engine import Timeouts, grade_notebook
    from aisys_grader.sandbox import Sandbox

    seed = secrets.randbits(48) if seed is None else seed
    start = time.monotonic()
    sandbox = Sandbox.create(allow_unsandboxed=True, probe=False)  # probed only if its kernel does not start
    given = handout(item)
    attempt = submission(given, path)
    grade = grade_notebook(item.exercise, given, attempt, seed=seed, sandbox=sandbox, timeouts=Timeouts(**TIMEOUTS))
    if sandbox.sandboxed and any("kernel could not run" in note for note in grade.notes) and sandbox.problem():
        sandbox = Sandbox.create(allow_unsandboxed=True)  # bubblewrap is installed but cannot run here
        grade = grade_notebook(item.exercise, given, attempt, seed=seed, sandbox=sandbox,
                               timeouts=Timeouts(**TIMEOUTS))
    notes = list(grade.notes)
    if not sandbox.sandboxed:
        notes.append("run in a child process without a sandbox (bubblewrap is not installed, or cannot run here)")
    failed = [(name, r.message) for name, r in grade.checks.items() if r.failed]
    return Outcome(passed=not failed and not grade.skipped, score=grade.score, max_score=grade.max_score,
                   failing=f"{failed[0][0]}: {failed[0][1]}" if failed else None, raised=_raised(grade.notebook),
                   notes=notes, skipped=grade.skipped, seed=seed, seconds=time.monotonic() - start)


def _raised(notebook) -> list[str]:
    """The errors of the attempt's own cells (not of the check cells), shortened."""
    errors = []
    for cell in notebook.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") != "CheckFailure":
                text = f"{output.get('ename')}: {output.get('evalue')}"
                errors.append(text if len(text) <= SHOWN_OUTPUT else text[:SHOWN_OUTPUT] + " ...")
    return errors
