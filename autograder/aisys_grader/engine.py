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
caller to record no grade for the notebook at all (autograde.py).
"""

import ast
import copy
import time
from dataclasses import dataclass, field

import nbformat
from . import checks as checks_module
from .compare import CheckFailure
from .kernel import KernelDied, KernelStudent, SandboxedKernel
from .sandbox import Sandbox
from .student import BridgeStudent


@dataclass(frozen=True)
class Timeouts:
    cell: float = 120  # one notebook cell
    call: float = 60  # one call of a student function by a check
    notebook: float = 900  # the whole notebook, checks included


@dataclass
class CheckOutcome:
    name: str
    points: float
    passed: bool
    message: str
    skipped: bool = False  # could not run here (needs a GPU): neither passed nor failed

    @property
    def score(self) -> float:
        return self.points if self.passed else 0.0


@dataclass
class NotebookGrade:
    exercise: str
    seed: int
    checks: dict[str, CheckOutcome]
    notebook: nbformat.NotebookNode  # the program as run, with outputs: what feedback shows
    notes: list[str] = field(default_factory=list)
    enforced: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks.values())

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks.values())

    @property
    def skipped(self) -> list[str]:
        """Checks that could not run on this machine: while any are, the notebook has no grade."""
        return [name for name, c in self.checks.items() if c.skipped]


def _meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _defined_functions(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def student_program(handout: nbformat.NotebookNode, submission: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """The handout with the submission's answers and extra cells in it (see the module docstring)."""
    program = copy.deepcopy(handout)
    if submission is None:
        return program
    template = {_meta(c).get("grade_id"): c for c in program.cells if _meta(c).get("grade_id")}
    solutions = {gid: c for gid, c in template.items() if _meta(c).get("solution")}
    wanted = {gid: _defined_functions(c.source) for gid, c in solutions.items()}
    locked_sources = {c.source.strip() for gid, c in template.items() if not _meta(c).get("solution")}

    answers, extras, anchor = {}, {}, None  # extras: grade_id of the cell they follow -> cells
    for cell in submission.get("cells", []):
        if cell.get("cell_type") != "code" or not isinstance(cell.get("source"), str):
            continue
        gid = _meta(cell).get("grade_id")
        if gid in solutions and gid not in answers:
            answers[gid] = cell.source
            anchor = gid
            continue
        if gid in template or cell.source.strip() in locked_sources:
            anchor = gid if gid in template else anchor
            continue  # a locked or graded cell: restored from the handout, whatever it says now
        defines = _defined_functions(cell.source)
        match = next((g for g, names in wanted.items() if g not in answers and names and names <= defines), None)
        if match is not None:  # a solution cell whose metadata was stripped
            answers[match] = cell.source
            anchor = match
        else:
            extras.setdefault(anchor, []).append(cell.source)

    cells = [nbformat.v4.new_code_cell(source) for source in extras.get(None, [])]
    for cell in program.cells:
        gid = _meta(cell).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
        cells.append(cell)
        cells += [nbformat.v4.new_code_cell(source) for source in extras.get(gid, [])]
    program.cells = cells
    for i, cell in enumerate(program.cells):
        cell.setdefault("id", f"student-{i:02d}")
    return program


def _passed(name: str) -> list:
    return [nbformat.v4.new_output("stream", name="stdout", text=f"passed: {name} (visible and hidden cases)\n")]


def _failed(message: str) -> list:
    return [nbformat.v4.new_output("error", ename="CheckFailure", evalue=message, traceback=[f"CheckFailure: {message}"])]


def _skipped(name: str, message: str) -> list:
    return [nbformat.v4.new_output("stream", name="stdout", text=f"{message}: {name} not graded\n")]


def _outputs(outcome: "CheckOutcome") -> list:
    if outcome.passed:
        return _passed(outcome.name)
    return _skipped(outcome.name, outcome.message) if outcome.skipped else _failed(outcome.message)


def grade_notebook(exercise: str, handout: nbformat.NotebookNode, submission: nbformat.NotebookNode | None, *,
                   seed: int, sandbox: Sandbox, timeouts: Timeouts = Timeouts()) -> NotebookGrade:
    """Run the student's program in the sandbox and grade every check of `exercise` (hidden cases from `seed`)."""
    start = time.monotonic()
    checks = checks_module.checks_for(exercise)
    program = student_program(handout, submission)
    outcomes: dict[str, CheckOutcome] = {}
    if submission is None:
        notes = ["the submission could not be read; graded as the blank notebook"]
    else:
        notes = [str(submission.metadata["aisys"]["note"])] if "note" in submission.metadata.get("aisys", {}) else []
    deadline = start + timeouts.notebook
    try:
        with SandboxedKernel(sandbox, checks_module.reference_modules(exercise)) as kernel:
            student = KernelStudent(kernel, call_timeout=timeouts.call, exercise=exercise)
            for cell in program.cells:
                if cell.cell_type != "code":
                    continue
                if time.monotonic() > deadline and kernel.alive():
                    kernel.kill(f"the notebook ran past its {timeouts.notebook:g} s limit")
                name = _meta(cell).get("grade_id") if _meta(cell).get("grade") else None
                if name in checks:
                    reaches = student if kernel.alive() else _Gone(kernel.death or "the kernel ended")
                    outcomes[name] = _run_check(checks[name], reaches, seed)
                    cell.outputs = _outputs(outcomes[name])
                elif kernel.alive():
                    student.sources.append(cell.source)  # what the clean room runs again: see cleanroom.py
                    done = kernel.execute(cell.source, min(timeouts.cell, max(0.0, deadline - time.monotonic())))
                    cell.outputs = done.outputs
                    if done.status == "timeout":
                        kernel.recover()
                        cell.outputs.append(_failed("this cell ran past its time limit and was interrupted")[0])
                    if done.status in ("error", "timeout") and kernel.alive():
                        kernel.forget_last_error()
                if kernel.death and kernel.death not in notes:
                    notes.append(kernel.death)  # the checks after this point score 0 (unless skipped)
            student.close()  # its clean room, with the kernel
            enforced = sandbox.enforced(kernel.cgroups, kernel.uid)
    except KernelDied as error:
        notes.append(f"the notebook's kernel could not run: {error}")
        enforced = sandbox.enforced()
    for name, check in checks.items():  # checks never reached: the kernel did not start
        if name not in outcomes:
            outcomes[name] = _run_check(check, _Gone(notes[-1] if notes else "its cell was not run"), seed)
    return NotebookGrade(exercise, seed, outcomes, program, notes, enforced, time.monotonic() - start)


class _Gone(BridgeStudent):
    """The student when the kernel is dead or never started: every call fails, saying why."""

    def __init__(self, why: str):
        self.why = why

    def _reply(self, function: str, *_):
        raise CheckFailure(f"not graded: {self.why}")

    _room = _reply


def _run_check(check, student: BridgeStudent, seed: int) -> CheckOutcome:
    """Visible, then hidden cases. Run even for a dead kernel: a check that cannot run on this machine
    (needs a GPU) is skipped whatever the notebook did; any other fails at its first call."""
    try:
        for hidden in (False, True):
            result = checks_module.run(check, student, hidden=hidden, seed=seed)
            if not result.passed:
                gone = isinstance(student, _Gone) and result.failed
                return CheckOutcome(check.name, check.points, False,
                                    f"not graded: {student.why}" if gone else result.message, skipped=result.skipped)
    except Exception as error:  # a bug in the check itself: never blame the student silently
        return CheckOutcome(check.name, check.points, False,
                            f"the check itself failed ({type(error).__name__}: {error}); tell your instructor")
    return CheckOutcome(check.name, check.points, True, "")
