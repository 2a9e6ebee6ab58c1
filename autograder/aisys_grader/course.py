"""`aisys-grader grade`: grade a class's submissions in parallel and write gradebook, CSV and feedback.

1. Collect submissions from a folder or zip: nbgrader's `<student>/<assignment>/<notebook>.ipynb`
   layout, or one `<student>.ipynb` per student. Each goes into the course's submitted/
   folder; a file that is not a readable notebook is kept beside it (`.ipynb.received`) and
   graded as the blank notebook, so every student ends with a grade.
2. Grade, in parallel worker processes, each notebook whose file, source or seed changed
   since its last result (all of them with --force). Results are written atomically, so an
   interrupted run loses nothing and the next run picks up where it stopped.
3. Write: one process runs nbgrader's autograde (replaying the results), feedback and
   export, so the gradebook has a single writer.

A notebook whose checks were skipped (GPU-only checks, graded without a GPU) gets no grade
and no feedback page: the summary says "<exercise> needs a GPU to grade: ...", and the next
run on a machine with a GPU grades it.
"""

import concurrent.futures
import json
import os
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.apps import NbGraderAPI
from nbgrader.api import Gradebook
from nbgrader.plugins import CsvExportPlugin
from sqlalchemy.exc import SAWarning
from tqdm import tqdm

from . import records
from .autograde import (cached_result, grade_submission, handout, needs_gpu_message, read_submission, sha256,
                        submitted_path)
from .engine import Timeouts
from .generate import nbgrader_config
from .sandbox import Limits, Sandbox


@dataclass(frozen=True)
class Submission:
    student: str
    notebook: str
    path: Path


def _extract(archive: Path, into: Path) -> Path:
    """Unpack a zip, refusing members that would land outside `into`."""
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.infolist():
            target = (into / member.filename).resolve()
            if not target.is_relative_to(into.resolve()):
                raise ValueError(f"submissions archive {archive} has an unsafe path: {member.filename!r}")
        zipped.extractall(into)
    return into


def collect(folder: Path, assignment: str, notebooks: list[str]) -> list[Submission]:
    """Submissions in `folder`: nbgrader's layout if present (at any depth), else one notebook per student."""
    nested = sorted(p for p in folder.rglob("*.ipynb") if p.parent.name == assignment)
    if nested:
        return [Submission(p.parent.parent.name, p.stem, p) for p in nested if p.stem in notebooks]
    if len(notebooks) != 1:
        raise ValueError(f"assignment {assignment!r} has {len(notebooks)} notebooks ({', '.join(notebooks)}): "
                         f"submissions must use nbgrader's <student>/{assignment}/<notebook>.ipynb layout")
    flat = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    students = [p.stem for p in flat]
    if len(set(students)) != len(students):
        raise ValueError(f"two notebooks in {folder} have the same student name (file name)")
    return [Submission(p.stem, notebooks[0], p) for p in flat]


def _receive(course: Path, assignment: str, submission: Submission) -> None:
    """Put a submission into submitted/, unchanged if it is a notebook; else keep it and grade the blank."""
    target = submitted_path(course, assignment, submission.student, submission.notebook)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = submission.path.read_bytes()
    if read_submission(submission.path) is None:
        target.with_suffix(".ipynb.received").write_bytes(data)
        blank = handout(course, assignment, submission.notebook)
        blank.metadata["aisys"] = {"note": "the submitted file was not a readable notebook; graded as the blank"}
        data = nbformat.writes(blank).encode()
    if not target.exists() or target.read_bytes() != data:
        target.write_bytes(data)


def _grade_one(args) -> str | None:
    """Grade one notebook in a worker; an error is returned (and that notebook graded again next run)."""
    course, assignment, student, notebook, seed, sandbox, timeouts = args
    try:
        grade_submission(course, assignment, student, notebook, assignment_seed=seed, sandbox=sandbox,
                         timeouts=timeouts)
    except Exception as error:
        return f"{student}/{notebook}: {type(error).__name__}: {error}"
    return None


def grade(submissions_path: Path, course: Path, assignment: str, *, workers: int = 2, force: bool = False,
          allow_unsandboxed: bool = False, seed: int | None = None, csv_path: Path | None = None,
          timeouts: Timeouts = Timeouts(), limits: Limits | None = None, progress: bool = True) -> list[dict]:
    """Grade every submission of `assignment` found at `submissions_path`; return one summary row per student."""
    course = Path(course).resolve()
    # nbgrader runs `alembic` from PATH to set up its database, as in an activated environment.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    sandbox = Sandbox.create(allow_unsandboxed=allow_unsandboxed, limits=limits)
    notebooks = [p.stem for p in sorted((course / "source" / assignment).glob("*.ipynb"))]
    if not notebooks:
        raise ValueError(f"no source notebooks for assignment {assignment!r} in {course / 'source' / assignment}")

    with warnings.catch_warnings():  # nbgrader's own session handling warns on every autograde
        warnings.filterwarnings("ignore", message="Object of type <Submitted", category=SAWarning)
        config = nbgrader_config(course)
        config.SandboxedExecute.course_root = str(course)
        config.SandboxedExecute.allow_unsandboxed = allow_unsandboxed
        config.SandboxedExecute.replay_skipped = True  # this run grades them just before autograde replays them
        api = NbGraderAPI(config=config)
        with Gradebook(api.coursedir.db_url) as gradebook:
            known = {a.name for a in gradebook.assignments}
        if assignment not in known or not all((course / "release" / assignment / f"{nb}.ipynb").exists()
                                              for nb in notebooks):
            _succeeded(api.generate_assignment(assignment, force=True), "generate_assignment")
        assignment_seed = records.assignment_seed(api.coursedir.db_url, assignment, seed)
        config.SandboxedExecute.seed = assignment_seed

        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(submissions_path)
            if folder.is_file() and zipfile.is_zipfile(folder):
                folder = _extract(folder, Path(scratch))
            if not folder.is_dir():
                raise ValueError(f"submissions must be a folder or a zip file, got {submissions_path}")
            received = collect(folder, assignment, notebooks)
            for submission in received:
                _receive(course, assignment, submission)

        todo = [(course, assignment, s.student, s.notebook, assignment_seed, sandbox, timeouts) for s in received
                if force or cached_result(course, assignment, s.student, s.notebook, assignment_seed) is None]
        with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
            jobs = [pool.submit(_grade_one, job) for job in todo]
            errors = [f.result() for f in tqdm(concurrent.futures.as_completed(jobs), total=len(jobs),
                                               desc=f"grading {assignment}", unit="notebook", disable=not progress)]
        if any(errors):
            raise RuntimeError("grading failed for:\n" + "\n".join(e for e in errors if e)
                               + "\nEvery other result is saved; run the command again to retry these.")

        # Every submission now has a graded result, except those whose checks were skipped (they need a GPU).
        ungraded = {(s.student, s.notebook) for s in received
                    if cached_result(course, assignment, s.student, s.notebook, assignment_seed) is None}
        students = sorted({s.student for s in received})
        for student in tqdm(students, desc="gradebook and feedback", unit="student", disable=not progress):
            if _needs_writing(api.coursedir.db_url, course, assignment, student, notebooks, force):
                _succeeded(api.autograde(assignment, student, force=True, create=True), f"autograde {student}")
                _succeeded(api.generate_feedback(assignment, student, force=True), f"generate_feedback {student}")
        for student, notebook in ungraded:  # its page would show 0 points for checks that never ran
            (course / "feedback" / student / assignment / f"{notebook}.html").unlink(missing_ok=True)

        with Gradebook(api.coursedir.db_url) as gradebook:
            CsvExportPlugin(to=str(csv_path or course / "grades.csv")).export(gradebook)
        return summary(api.coursedir.db_url, assignment, students, notebooks, ungraded)


def _needs_writing(db_url: str, course: Path, assignment: str, student: str, notebooks: list[str], force: bool) -> bool:
    """Whether the gradebook lacks the current result of any of this student's notebooks."""
    if force:
        return True
    for notebook in notebooks:
        submitted = submitted_path(course, assignment, student, notebook)
        row = records.recorded_run(db_url, assignment, student, notebook)
        if submitted.exists() and (row is None or row.submission_sha256 != sha256(submitted)):
            return True
    return not (course / "feedback" / student / assignment).exists()


def _succeeded(result: dict, what: str) -> None:
    if not result.get("success"):
        raise RuntimeError(f"nbgrader {what} failed:\n{result.get('log', '')}\n{result.get('error', '')}")


def summary(db_url: str, assignment: str, students: list[str], notebooks: list[str],
            ungraded: set[tuple[str, str]] = frozenset()) -> list[dict]:
    """One row per student: score and maximum over the notebooks graded; `needs_gpu` lists the exercises
    that were not (their checks were skipped), and the notes say so."""
    rows = []
    for student in students:
        needs_gpu = [f"{assignment}/{nb}" for nb in notebooks if (student, nb) in ungraded]
        runs = [records.recorded_run(db_url, assignment, student, nb) for nb in notebooks
                if (student, nb) not in ungraded]  # an older grade of a notebook graded again is not this run's
        runs = [r for r in runs if r is not None]
        notes = [n for r in runs for n in json.loads(r.report)["notes"]] + [needs_gpu_message(e) for e in needs_gpu]
        rows.append({"student": student, "score": sum(r.score for r in runs),
                     "max_score": sum(r.max_score for r in runs), "notes": "; ".join(notes), "needs_gpu": needs_gpu})
    return rows

