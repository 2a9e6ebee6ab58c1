"""nbgrader's autograde with the sandboxed engine plugged in where nbgrader executes notebooks.

`SandboxedExecute` replaces nbgrader's Execute preprocessor (see nbgrader_config.py):
for each submitted notebook it grades with the engine (or replays a result the
parallel `aisys-grader grade` command already computed for exactly that file), puts
the outcome into the graded cells' outputs, and records seed and report. nbgrader's
own SaveAutoGrades then writes the scores into the gradebook, so formgrader,
feedback and export keep working, and only the grader's process ever writes.

A notebook whose checks were skipped (GPU-only checks on a machine without a GPU) gets
no grade: its run is kept apart from graded results (`<notebook>.skipped.json`), nothing
is recorded for it, and `SaveGrades` leaves its gradebook entries as they were, neither
0 nor a stale replacement, until a run on a machine with a GPU grades it. Optional checks
(speed checks) skipped there are left out instead: the notebook is graded and recorded,
and their cells get no automatic score in the gradebook (nbgrader's "needs manual grade").
"""

import hashlib
import json
import os
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor, SaveAutoGrades
from traitlets import Bool, Integer, Unicode

from . import records
from .exercise import exercise_for, find
from .engine import NotebookGrade, Timeouts, grade_notebook
from .sandbox import Sandbox

ENGINE_VERSION = "1"  # bump when grading changes meaning: cached results are then redone


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result_path(course: Path, assignment: str, student: str, notebook: str) -> Path:
    return Path(course) / "aisys_results" / assignment / student / f"{notebook}.json"


def skipped_path(course: Path, assignment: str, student: str, notebook: str) -> Path:
    """Where the last run of a notebook whose checks were skipped (it needs a GPU) is kept: never a grade."""
    return result_path(course, assignment, student, notebook).with_suffix(".skipped.json")


def needs_gpu_message(exercise: str) -> str:
    return f"{exercise} needs a GPU to grade: run aisys-grader on a machine with a GPU"


def submitted_path(course: Path, assignment: str, student: str, notebook: str) -> Path:
    return Path(course) / "submitted" / student / assignment / f"{notebook}.ipynb"


def handout(course: Path, assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The student's notebook as released (nbgrader generate_assignment writes it to release/)."""
    path = Path(course) / "release" / assignment / f"{notebook}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `nbgrader generate_assignment {assignment}` first")
    return nbformat.read(path, as_version=4)


def read_submission(path: Path) -> nbformat.NotebookNode | None:
    """The submitted notebook, or None when it is not a readable notebook at all."""
    try:
        notebook = nbformat.reads(path.read_text(errors="replace"), as_version=4)
    except Exception:
        return None
    return notebook if isinstance(notebook.get("cells"), list) else None


def grade_submission(course: Path, assignment: str, student: str, notebook: str, *, assignment_seed: int,
                     sandbox: Sandbox, timeouts: Timeouts = Timeouts()) -> dict:
    """Grade submitted/<student>/<assignment>/<notebook>.ipynb and save the result where replay finds it.

    A run with skipped checks is saved apart (`skipped_path`) and leaves any graded result as it was.
    """
    submitted = submitted_path(course, assignment, student, notebook)
    seed = records.notebook_seed(assignment_seed, student, notebook, sha256(submitted))
    grade = grade_notebook(exercise_for(assignment, notebook), handout(course, assignment, notebook),
                           read_submission(submitted), seed=seed, sandbox=sandbox, timeouts=timeouts)
    result = _as_result(grade, key=_key(course, assignment, student, notebook, seed))
    skipped = skipped_path(course, assignment, student, notebook)
    path = skipped if grade.skipped else result_path(course, assignment, student, notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(result))
    os.replace(partial, path)  # a result file is whole or absent, whenever grading is interrupted
    if not grade.skipped:
        skipped.unlink(missing_ok=True)
    return result


def _key(course: Path, assignment: str, student: str, notebook: str, seed: int) -> str:
    """What a result depends on: the engine, the submitted file, the handout, the checks and the seed."""
    parts = [ENGINE_VERSION, str(seed)] + [sha256(p) for p in (
        submitted_path(course, assignment, student, notebook),
        Path(course) / "release" / assignment / f"{notebook}.ipynb",
        find(exercise_for(assignment, notebook)).checks)]
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _as_result(grade: NotebookGrade, key: str) -> dict:
    return {
        "key": key, "exercise": grade.exercise, "seed": grade.seed,
        "score": grade.score, "max_score": grade.max_score, "skipped": grade.skipped,
        "checks": [c.record() for c in grade.checks.values()],
        "notes": grade.notes, "enforced": grade.enforced, "seconds": grade.seconds,
        "notebook": grade.notebook,
    }


def cached_result(course: Path, assignment: str, student: str, notebook: str, assignment_seed: int, *,
                  skipped: bool = False) -> dict | None:
    """The saved result for exactly the submitted file, source and seed, or None.

    With `skipped`, a saved run whose checks were skipped does where there is no such graded result.
    """
    if not submitted_path(course, assignment, student, notebook).exists():
        return None
    seed = records.notebook_seed(assignment_seed, student, notebook,
                                 sha256(submitted_path(course, assignment, student, notebook)))
    paths = [result_path(course, assignment, student, notebook)]
    paths += [skipped_path(course, assignment, student, notebook)] if skipped else []
    for path in paths:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if result.get("key") == _key(course, assignment, student, notebook, seed):
            return result
    return None


class SandboxedExecute(NbGraderPreprocessor):
    """nbgrader preprocessor: grade with the sandboxed engine instead of executing in the student's kernel."""

    allow_unsandboxed = Bool(False, help="Grade without bubblewrap where it is missing (submissions can then "
                                         "fake their grades)").tag(config=True)
    seed = Integer(None, allow_none=True, help="The assignment's secret seed for hidden inputs; "
                                               "by default drawn once and kept in the gradebook").tag(config=True)
    course_root = Unicode("", help="The course directory (default: the current directory)").tag(config=True)
    replay_skipped = Bool(False, help="Replay a saved run whose checks were skipped instead of grading again "
                                      "(`aisys-grader grade` has just run them)").tag(config=True)

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        assignment, student, notebook, db_url = ids["assignment"], ids["student"], ids["notebook"], ids["db_url"]
        course = Path(self.course_root or self.config.CourseDirectory.get("root", "") or os.getcwd())
        assignment_seed = records.assignment_seed(db_url, assignment, self.seed)
        result = cached_result(course, assignment, student, notebook, assignment_seed, skipped=self.replay_skipped)
        if result is None:
            sandbox = Sandbox.create(allow_unsandboxed=self.allow_unsandboxed)
            result = grade_submission(course, assignment, student, notebook, assignment_seed=assignment_seed,
                                      sandbox=sandbox)
        resources["aisys_left_out"] = [c["name"] for c in result["checks"] if c.get("optional")]
        if result.get("skipped"):  # no grade: SaveGrades records nothing for this notebook
            resources["aisys_skipped"] = result["skipped"]
            self.log.warning("%s/%s/%s: %s; nothing recorded", student, assignment, notebook,
                             needs_gpu_message(exercise_for(assignment, notebook)))
        else:
            result["submission_sha256"] = sha256(submitted_path(course, assignment, student, notebook))
            records.record_run(db_url, assignment, student, notebook, result)
        for note in result["notes"]:
            self.log.warning("%s/%s/%s: %s", student, assignment, notebook, note)
        graded = nbformat.from_dict(result["notebook"])
        graded.metadata = nb.metadata
        return graded, resources


class SaveGrades(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, except for a notebook whose checks were skipped (SandboxedExecute says so):
    it has no grade, so its gradebook entries stay as they were: no 0, and a grade from an earlier run stays;
    and for the cells of optional checks left out, which get no automatic score."""

    def preprocess(self, nb, resources):
        if resources.get("aisys_skipped"):
            return nb, resources
        return super().preprocess(nb, resources)

    def _add_score(self, cell, resources):
        """An optional check left out on this machine gets no automatic score: not full marks, not 0."""
        if cell.metadata["nbgrader"]["grade_id"] not in resources.get("aisys_left_out", ()):
            return super()._add_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        grade.auto_score, grade.needs_manual_grade = None, True
        self.gradebook.db.commit()
