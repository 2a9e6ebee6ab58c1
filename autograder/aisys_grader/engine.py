"""Grading one notebook: the student's code runs in a sandboxed kernel, the checks run here.

`student_program` takes the handout (the student's notebook as nbgrader released it)
and puts the student's answers into it: solution cells found by their nbgrader id
or, where the metadata was stripped, by the functions they define; the student's
own extra cells where they stood; locked and graded cells as handed out.
`grade_notebook` runs that program cell by cell in a SandboxedKernel and, at each
graded cell, runs its check from the grader's process, through the bridge. The
grade is decided here and written into the graded cell's outputs, which is what
nbgrader's SaveAutoGrades reads: an error output scores 0, anything else full marks.
A check that cannot run on this machine (a GPU-only check without a GPU) is skipped:
its cell says so, and the notebook's grade lists it in `skipped`, which tells the
caller to record no grade for the notebook at all (autograde.py). An optional one (a
speed check, `require_gpu(optional=True)`) is listed in `left_out` instead: the notebook
is graded without it, its points out of both the score and the maximum.
"""

import ast
import copy
import time
from dataclasses import dataclass, field, replace

import nbformat
from . import checks as checks_module
from . import inert
from .checks import Result
from .compare import CheckFailure, redacted
from .cleanroom import SandboxedRoom
from .exercise import find
from .kernel import WALL_FACTOR, Budget, KernelDied, KernelStudent, SandboxedKernel
from .sandbox import Sandbox
from .student import BridgeStudent


@dataclass(frozen=True)
class Timeouts:
    """Time limits, on the job's clock: CPU seconds of the sandbox's processes where a cgroup counts them (each
    limit then also cut at `wall_factor` times as long in wall time), else wall seconds (kernel.py)."""

    cell: float = 120  # one notebook cell
    call: float = 60  # one call of a student function by a check
    notebook: float = 900  # the whole notebook, checks included
    wall_factor: float = WALL_FACTOR


def _time_limits(timeouts: Timeouts, kernel: SandboxedKernel) -> str:
    """The time limits as enforced, for the grade report."""
    limits = f"{timeouts.cell:g} s a cell, {timeouts.call:g} s a call, {timeouts.notebook:g} s the notebook"
    if kernel.metered:
        return (f"{limits}, in CPU seconds of the job's processes (cgroup), each also cut at "
                f"{timeouts.wall_factor:g}x in wall time")
    return f"{limits}, in wall-clock seconds (no CPU-time counter here: a loaded machine makes them bite sooner)"


@dataclass
class NotebookGrade:
    exercise: str
    seed: int
    checks: dict[str, Result]  # by check name
    notebook: nbformat.NotebookNode  # the program as run, with outputs: what feedback shows
    notes: list[str] = field(default_factory=list)
    enforced: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks.values())

    @property
    def max_score(self) -> float:
        return sum(c.check.points for name, c in self.checks.items() if name not in self.left_out)

    @property
    def skipped(self) -> list[str]:
        """Checks that could not run on this machine: while any are, the notebook has no grade."""
        return [name for name, c in self.checks.items() if c.skipped and not c.optional]

    @property
    def left_out(self) -> list[str]:
        """Optional checks that could not run on this machine: the grade is without them, their points left out."""
        return [name for name, c in self.checks.items() if c.skipped and c.optional]


def _meta(cell) -> dict:
    """A cell's nbgrader metadata; {} wherever the cell, its metadata or that part is not a mapping."""
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def _grade_id(cell) -> str | None:
    grade_id = _meta(cell).get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


def _code(cell) -> str | None:
    """The source of a code cell (joined, if stored as a list of lines); None for any other or malformed cell."""
    if not isinstance(cell, dict) or cell.get("cell_type") != "code":
        return None
    source = cell.get("source")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    return source if isinstance(source, str) else None


def _defined_functions(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: null bytes; deep nesting
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def student_program(handout: nbformat.NotebookNode, submission) -> nbformat.NotebookNode:
    """The handout with the submission's answers and extra cells in it (see the module docstring).

    `submission` is whatever a notebook file decoded to: a malformed cell, a metadata field of the
    wrong type or a source that is not text is ignored, never an error."""
    program = copy.deepcopy(handout)
    cells_in = submission.get("cells") if isinstance(submission, dict) else None
    if not isinstance(cells_in, list):
        return program
    template = {_grade_id(c): c for c in program.cells if _grade_id(c)}
    solutions = {gid: c for gid, c in template.items() if _meta(c).get("solution")}
    wanted = {gid: _defined_functions(c.source) for gid, c in solutions.items()}
    locked_sources = {c.source.strip() for gid, c in template.items() if not _meta(c).get("solution")}

    answers, extras, anchor = {}, {}, None  # extras: grade_id of the cell they follow -> cells
    for cell in cells_in:
        source = _code(cell)
        if source is None:
            continue
        gid = _grade_id(cell)
        if gid in solutions and gid not in answers:
            answers[gid] = source
            anchor = gid
            continue
        if gid in template or source.strip() in locked_sources:
            anchor = gid if gid in template else anchor
            continue  # a locked or graded cell: restored from the handout, whatever it says now
        defines = _defined_functions(source)
        match = next((g for g, names in wanted.items() if g not in answers and names and names <= defines), None)
        if match is not None:  # a solution cell whose metadata was stripped
            answers[match] = source
            anchor = match
        else:
            extras.setdefault(anchor, []).append(source)

    cells = [nbformat.v4.new_code_cell(source) for source in extras.get(None, [])]
    for cell in program.cells:
        gid = _grade_id(cell)
        if gid in answers:
            cell.source = answers[gid]
        cells.append(cell)
        cells += [nbformat.v4.new_code_cell(source) for source in extras.get(gid, [])]
    program.cells = cells
    for i, cell in enumerate(program.cells):
        cell.setdefault("id", f"student-{i:02d}")
    return program


def _intake_note(submission) -> list[str]:
    """The note the grader's intake left in the notebook's metadata (the file was not a notebook, say)."""
    metadata = submission.get("metadata") if isinstance(submission, dict) else None
    ours = metadata.get("aisys") if isinstance(metadata, dict) else None
    note = ours.get("note") if isinstance(ours, dict) else None
    return [note] if isinstance(note, str) else []


def _passed(name: str) -> list:
    return [nbformat.v4.new_output("stream", name="stdout", text=f"passed: {name} (visible and hidden cases)\n")]


def _failed(message: str) -> list:
    return [nbformat.v4.new_output("error", ename="CheckFailure", evalue=message,
                                   traceback=[f"CheckFailure: {message}"])]


def _skipped(name: str, message: str, optional: bool = False) -> list:
    left_out = "; its points are left out of this grade" if optional else ""
    return [nbformat.v4.new_output("stream", name="stdout", text=f"{message}: {name} not graded{left_out}\n")]


def _withheld(status: str) -> list:
    """What feedback shows of a cell run after hidden data reached the student's code: not its output, which
    could carry that data into a resubmission."""
    ended = {"ok": "", "error": " It ended with an error.", "timeout": " It ran past its time limit.",
             "dead": " The kernel had ended."}.get(status, "")
    return [nbformat.v4.new_output("stream", name="stdout", text=(
        "[output not shown: this cell ran after hidden checks had passed their data to your code, so what it "
        f"printed could hold that data. Run the notebook yourself to see it.{ended}]\n"))]


def _outputs(result: Result) -> list:
    if result.passed:
        return _passed(result.check.name)
    return _skipped(result.check.name, result.message, result.optional) if result.skipped else _failed(result.message)


def grade_notebook(exercise: str, handout: nbformat.NotebookNode, submission: nbformat.NotebookNode | None, *,
                   seed: int, sandbox: Sandbox, timeouts: Timeouts = Timeouts()) -> NotebookGrade:
    """Run the student's program in the sandbox and grade every check of `exercise` (hidden cases from `seed`)."""
    start = time.monotonic()
    checks = checks_module.checks_for(exercise)
    program = student_program(handout, submission)
    outcomes: dict[str, Result] = {}
    if submission is None:
        notes = ["the submission could not be read; graded as the blank notebook"]
    else:
        notes = _intake_note(submission)
    try:
        spec = find(exercise).spec  # of aisys, kernel and room hold only what students may import: boundary.py
        with SandboxedKernel(sandbox, spec.student_may_import, spec.reference) as kernel, \
                SandboxedRoom(sandbox, spec.student_may_import, spec.reference) as room:
            budget = Budget(kernel, timeouts.notebook, timeouts.wall_factor)
            student = KernelStudent(kernel, call_timeout=timeouts.call, budget=budget, exercise=exercise, room=room)
            exposed = False  # whether hidden data has reached the student's code: from then on, nothing it says
            for cell in program.cells:  # reaches feedback (see compare.redacted)
                if cell.cell_type != "code":
                    continue
                if budget.exhausted() and kernel.alive():
                    kernel.kill(budget.why)
                name = _grade_id(cell) if _meta(cell).get("grade") else None
                if name in checks:
                    reaches = student if kernel.alive() else _Gone(kernel.death or "the kernel ended")
                    with redacted(exposed):
                        outcomes[name] = _run_check(checks[name], reaches, seed)
                    exposed = exposed or (outcomes[name].hidden and reaches is student)
                    cell.outputs = _outputs(outcomes[name])
                elif kernel.alive():
                    student.sources.append(cell.source)  # what the clean room runs again: see cleanroom.py
                    done = kernel.execute(cell.source, *budget.allowance(timeouts.cell))
                    # feedback shows them: text only (inert), nothing at all once hidden data reached the student
                    cell.outputs = _withheld(done.status) if exposed else inert.outputs(done.outputs)
                    if done.status == "timeout" and budget.exhausted():
                        kernel.kill(budget.why)
                    elif done.status == "timeout":
                        kernel.recover()
                        cell.outputs.append(_failed("this cell ran past its time limit and was interrupted")[0])
                    if done.status in ("error", "timeout") and kernel.alive():
                        kernel.forget_last_error()
                if kernel.death and kernel.death not in notes:
                    notes.append(kernel.death)  # the checks after this point score 0 (unless skipped)
            enforced = {**sandbox.enforced(kernel.job.cgroups, kernel.job.uid), "time": _time_limits(timeouts, kernel)}
            if kernel.dropped:
                notes.append(f"{kernel.dropped} messages from the kernel failed their signature check or did not "
                             "decode, and were ignored")
        notes += kernel.job.notes + room.notes
    except KernelDied as error:
        notes.append(f"the notebook's kernel could not run: {error}")
        enforced = sandbox.enforced()
    for name, check in checks.items():  # checks never reached: the kernel did not start
        if name not in outcomes:
            outcomes[name] = _run_check(check, _Gone(notes[-1] if notes else "its cell was not run"), seed)
    grade = NotebookGrade(exercise, seed, outcomes, program, notes, enforced, time.monotonic() - start)
    if grade.left_out:
        points = sum(outcomes[name].check.points for name in grade.left_out)
        notes.append(f"not graded on this machine: {', '.join(grade.left_out)} ({outcomes[grade.left_out[0]].message}"
                     f"); their {points:g} points are left out of the score and its maximum")
    return grade


class _Gone(BridgeStudent):
    """The student when the kernel is dead or never started: every call fails, saying why."""

    def __init__(self, why: str):
        self.why = why

    def _reply(self, function: str, *_):
        raise CheckFailure(f"not graded: {self.why}")

    _room = _reply


def _run_check(check, student: BridgeStudent, seed: int) -> Result:
    """Visible, then hidden cases: the first run that does not pass, else the hidden one; its `hidden` says whether
    hidden data reached the student. Run even for a dead kernel: a check that cannot run on this machine (needs a
    GPU) is skipped whatever the notebook did; any other fails at its first call."""
    try:
        for hidden in (False, True):
            result = checks_module.run(check, student, hidden=hidden, seed=seed)
            if not result.passed:
                break
    except Exception as error:  # a bug in the check itself: never blame the student silently
        # hidden=True: it may have failed after hidden data had reached the student's code
        return Result(check, True, False,
                      f"the check itself failed ({type(error).__name__}: {error}); tell your instructor")
    if result.failed and isinstance(student, _Gone):
        return replace(result, message=f"not graded: {student.why}")
    return result
