"""`aisys-grader grade`: grade a class's submissions in parallel and write gradebook, CSV and feedback.

1. Take the submissions in from a folder or zip (intake.py: one layout for the whole input, each
   student's notebook from their own place, bounded reads; everything else is reported, never
   used). Each goes into the course's submitted/ folder normalised: the handout with the
   student's answers and extra cells in it (engine.student_program), which nbgrader's own steps
   always accept; the file as received is kept beside it (`.ipynb.received`). A file that was
   refused or is not a readable notebook is graded as the blank notebook, with the reason.
2. Grade, in parallel worker processes, each notebook whose file, source or seed changed
   since its last result (all of them with --force). Results are written atomically, so an
   interrupted run loses nothing and the next run picks up where it stopped.
3. Write: one process runs nbgrader's autograde (replaying the results), feedback and
   export, so the gradebook has a single writer. grades.csv is written by export.CsvExport.
   Its timestamp (for late penalties) is when the student submitted, as intake.submitted_at
   finds it (nbgrader's timestamp.txt, else the notebook file's time), written to the
   submitted/ folder's timestamp.txt, where nbgrader's autograde reads it; each summary row
   says which it was.

One student never stops the class. An error while taking in, grading or recording one
student's notebook (a bug in the grader, nbgrader refusing it) is caught at that student:
their summary row says "not graded: <reason>" (the whole error is in
aisys_results/<assignment>/<student>/not-graded.log) and the run goes on for everyone else;
the next run tries them again. Nothing is recorded for them in this run: as for any student
without a graded submission, nbgrader's export lists them in grades.csv with a score of 0 and
no timestamp, and they get no feedback page (an earlier grade and its page, if they have one,
stay as they were, as for notebooks that need a GPU). A student name that cannot be one
(intake.name_problem) is reported the same way and written nowhere.

A notebook whose checks were skipped (GPU-only checks, graded without a GPU) gets no grade and
no feedback page: the summary says "<exercise> needs a GPU to grade: ...", and the next run on
a machine with a GPU grades it.
"""

import concurrent.futures
import json
import os
import sys
import traceback
import warnings
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import nbformat
from nbgrader.apps import NbGraderAPI
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning
from tqdm import tqdm

from . import inert, intake, records
from .autograde import (cached_result, grade_submission, handout, needs_gpu_message, read_submission, result_path,
                        sha256, submitted_path)
from .engine import Timeouts, student_program
from .exercise import exercise_for
from .export import CsvExport
from .generate import nbgrader_config
from .sandbox import Limits, Sandbox


class Summary(list):
    """One row per student found, as dicts (student, score, max_score, notes, needs_gpu, not_graded, submitted,
    submitted_from), with the intake's report: the layout used, the folder of the input that held the submissions,
    what was refused; and how many notebooks were unchanged, and where the grades and pages were written."""

    def __init__(self, rows: list[dict], layout: str, root: str, refused: list[intake.Refusal], *,
                 unchanged: int = 0, written: dict[str, Path] | None = None):
        super().__init__(rows)
        self.layout, self.root, self.refused = layout, root, refused
        self.unchanged = unchanged  # notebooks whose file, source and seed had not changed: not graded again
        self.written = written or {}  # what the run wrote: grades.csv, feedback and autograded notebooks

    @property
    def not_graded(self) -> list[dict]:
        return [row for row in self if row["not_graded"]]


def normalised(handout: nbformat.NotebookNode, submission: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """The notebook put into submitted/: the student's program (engine.student_program), from a submission
    cleaned of lone surrogates, with cell ids that do not change from run to run."""
    program = student_program(handout, None if submission is None else _clean(submission))
    taken = {cell.get("id") for cell in handout.cells}
    for i, cell in enumerate(program.cells):
        if cell.get("id") not in taken:  # a cell of the student's (nbformat gives a new cell a random id)
            cell["id"] = f"student-{i:03d}"
    return program


def _clean(value):
    """`value` with every string in it, keys too, cleaned of lone surrogates (inert.text). Lists are cleaned
    in place. Iterative, so that no depth of nesting can stop it."""
    top = [value]
    todo = [(top, 0)]
    while todo:
        container, key = todo.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = inert.text(item)
        elif isinstance(item, dict):
            container[key] = type(item)((inert.text(k) if isinstance(k, str) else k, v) for k, v in item.items())
            todo += [(container[key], k) for k in container[key]]
        elif isinstance(item, list):
            todo += [(item, i) for i in range(len(item))]
    return top[0]


def _write(path: Path, data: bytes) -> None:
    """Write `data` unless the file holds it already (its time and hash then say it did not change)."""
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def _receive(course: Path, assignment: str, submission: intake.Submission, source) -> str | None:
    """Put a submission into submitted/, normalised (see the module docstring); why it was refused, or None."""
    target = submitted_path(course, assignment, submission.student, submission.notebook)
    received = target.with_suffix(".ipynb.received")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        data, refused = source.read(submission.parts), None
    except intake.Refused as error:
        data, refused = None, str(error)
    if data is None:
        received.unlink(missing_ok=True)
        answers, note = None, f"the submitted file was refused: {refused}"
    else:
        _write(received, data)
        answers = read_submission(received)
        note = None if answers is not None else "the submitted file was not a readable notebook"
    program = normalised(handout(course, assignment, submission.notebook), answers)
    if note:
        program.metadata["aisys"] = {"note": f"{note}; graded as the blank"}
    _write(target, nbformat.writes(program).encode())
    return refused


def _grade_one(args) -> tuple[str, str] | None:
    """Grade one notebook in a worker; an error is returned, short and in full (that notebook is graded again
    next run)."""
    course, assignment, student, notebook, seed, sandbox, timeouts = args
    try:
        grade_submission(course, assignment, student, notebook, assignment_seed=seed, sandbox=sandbox,
                         timeouts=timeouts)
    except Exception as error:
        return f"{type(error).__name__}: {error}", traceback.format_exc()
    return None


def _grade_all(todo: list[tuple], workers: int, progress: bool, desc: str) -> dict[tuple[str, str], tuple[str, str]]:
    """Grade every job in worker processes; the failures by (student, notebook), short and in full.

    A worker process that dies (the grader crashing: a student's code runs in its own sandboxed kernel)
    breaks the whole pool; the jobs it took down are graded again one at a time, so that only the one
    that kills its worker is lost.
    """
    failures, again = {}, []
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        jobs = {pool.submit(_grade_one, job): job for job in todo}
        for future in tqdm(concurrent.futures.as_completed(jobs), total=len(jobs), desc=desc, unit="notebook",
                           disable=not progress):
            try:
                failure = future.result()
            except BrokenProcessPool:
                again.append(jobs[future])
                continue
            if failure:
                failures[jobs[future][2:4]] = failure
    for job in again:
        with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
            try:
                failure = pool.submit(_grade_one, job).result()
            except BrokenProcessPool as error:
                failure = "its grading worker process died", repr(error)
        if failure:
            failures[job[2:4]] = failure
    return failures


def _nbgrader_step(step, what: str, assignment: str, student: str, **kwargs) -> tuple[str, str] | None:
    """Run one of nbgrader's per-student steps; why it failed, short and in full, or None."""
    try:
        result = step(assignment, student, **kwargs)
    except Exception as error:
        return f"nbgrader {what} failed: {type(error).__name__}: {error}", traceback.format_exc()
    if result.get("success"):
        return None
    error = str(result.get("error") or "").strip()
    return (f"nbgrader {what} failed: {error.splitlines()[-1] if error else 'it gave no error'}",
            f"{result.get('log', '')}\n{error}")


def grade(submissions_path: Path, course: Path, assignment: str, *, workers: int = 2, force: bool = False,
          allow_unsandboxed: bool = False, seed: int | None = None, csv_path: Path | None = None,
          timeouts: Timeouts = Timeouts(), limits: Limits | None = None, progress: bool = True,
          layout: str = "auto") -> Summary:
    """Grade every submission of `assignment` found at `submissions_path`; one summary row per student found."""
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

        failed: dict[str, tuple[str, str]] = {}  # student -> why they are not graded, short and in full
        source = intake.open_input(Path(submissions_path))
        try:
            found = intake.collect(source, assignment, notebooks, layout)
            for submission in found.submissions:
                try:
                    refused = _receive(course, assignment, submission, source)
                except intake.ArchiveRefused:
                    raise
                except Exception as error:
                    failed[submission.student] = (f"could not be taken in: {type(error).__name__}: {error}",
                                                  traceback.format_exc())
                    continue
                if refused:
                    found.refused.append(intake.Refusal(submission.path, refused, submission.student))
            submitted = {student: _record_submitted_at(course, assignment, source, found, student)
                         for student in {s.student for s in found.submissions} - failed.keys()}
        finally:
            if isinstance(source, intake.Archive):
                source.close()
        students = sorted({s.student for s in found.submissions})
        received = [s for s in found.submissions if s.student not in failed]

        todo = [(course, assignment, s.student, s.notebook, assignment_seed, sandbox, timeouts) for s in received
                if force or cached_result(course, assignment, s.student, s.notebook, assignment_seed) is None]
        graded = _grade_all(todo, workers, progress and bool(todo), f"grading {assignment}")
        for (student, notebook), (short, full) in graded.items():
            failed.setdefault(student, (f"grading {notebook} failed: {short}", full))

        # Every submission now has a graded result, except those whose checks were skipped (they need a GPU).
        ungraded = {(s.student, s.notebook) for s in received if s.student not in failed
                    and cached_result(course, assignment, s.student, s.notebook, assignment_seed) is None}
        for student in tqdm(students, desc="gradebook and feedback", unit="student", disable=not progress):
            if student in failed or not _needs_writing(api.coursedir.db_url, course, assignment, student, notebooks,
                                                       force):
                continue
            why = _nbgrader_step(api.autograde, "autograde", assignment, student, force=True, create=True)
            if why is None:
                why = _nbgrader_step(api.generate_feedback, "generate_feedback", assignment, student, force=True)
                why = why and (f"{why[0]} (the grade is in the gradebook, with no feedback page)", why[1])
            if why is not None:
                failed[student] = why
        for student, notebook in ungraded:  # its page would show 0 points for checks that never ran
            (course / "feedback" / student / assignment / f"{notebook}.html").unlink(missing_ok=True)
        for student in students:
            log = result_path(course, assignment, student, "any").parent / "not-graded.log"
            if student in failed:
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(f"{failed[student][0]}\n\n{failed[student][1]}", errors="replace")
            else:
                log.unlink(missing_ok=True)

        csv_path = Path(csv_path or course / "grades.csv").resolve()
        with Gradebook(api.coursedir.db_url) as gradebook:
            for student in failed:  # listed in grades.csv as nbgrader lists a student with nothing graded
                gradebook.update_or_create_student(student)
            CsvExport(to=str(csv_path)).export(gradebook)
        rows = summary(api.coursedir.db_url, assignment, students, notebooks, ungraded,
                       {student: why[0] for student, why in failed.items()})
        for row in rows:
            when, basis = submitted.get(row["student"], (None, "none (not taken in)"))
            row["submitted"], row["submitted_from"] = (when.isoformat(timespec="seconds") if when else ""), basis
        own = {s.path for s in found.submissions}
        for row in rows:  # what else was in the student's folder (found.refused says why)
            strays = [r.path for r in found.refused if r.student == row["student"] and r.path not in own]
            row["notes"] = "; ".join(([row["notes"]] if row["notes"] else [])
                                     + ([f"not used: {', '.join(strays)}"] if strays else []))
        rows += [{"student": name, "score": 0, "max_score": 0, "notes": "", "needs_gpu": [], "not_graded": why}
                 for name, why in found.bad_names.items()]
        written = {"grades": csv_path, "feedback": course / "feedback" / "<student>" / assignment,
                   "autograded": course / "autograded" / "<student>" / assignment}
        return Summary(rows, found.layout, found.root, sorted(found.refused, key=lambda r: r.path),
                       unchanged=len(received) - len(todo), written=written)


def _record_submitted_at(course: Path, assignment: str, source, found: intake.Intake, student: str):
    """When `student` submitted, and from what (intake.submitted_at), written where nbgrader's autograde reads it
    (submitted/<student>/<assignment>/timestamp.txt), so that grades.csv has it and late penalties apply."""
    when, basis = intake.submitted_at(source, found.layout, [s for s in found.submissions if s.student == student])
    stamp = submitted_path(course, assignment, student, "any").parent / intake.TIMESTAMP
    if when is None:
        stamp.unlink(missing_ok=True)
    else:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        _write(stamp, when.strftime("%Y-%m-%d %H:%M:%S.%f UTC").encode())
    return when, basis


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
            ungraded: set[tuple[str, str]] = frozenset(), failed: dict[str, str] | None = None) -> list[dict]:
    """One row per student: score and maximum over the notebooks graded; `needs_gpu` lists the exercises
    that were not (their checks were skipped), and the notes say so; `not_graded` says why a student could not
    be graded in this run (`failed`), and their row counts nothing."""
    rows, failed = [], failed or {}
    for student in students:
        needs_gpu = [exercise_for(assignment, nb) for nb in notebooks if (student, nb) in ungraded]
        runs = [records.recorded_run(db_url, assignment, student, nb) for nb in notebooks
                if (student, nb) not in ungraded]  # an older grade of a notebook graded again is not this run's
        runs = [r for r in runs if r is not None and student not in failed]
        notes = [n for r in runs for n in json.loads(r.report)["notes"]] + [needs_gpu_message(e) for e in needs_gpu]
        rows.append({"student": student, "score": sum(r.score for r in runs),
                     "max_score": sum(r.max_score for r in runs), "notes": "; ".join(notes), "needs_gpu": needs_gpu,
                     "not_graded": failed.get(student, "")})
    return rows
