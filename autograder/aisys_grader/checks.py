"""Checks: named, pointed functions that compare student code with the aisys reference on seeded inputs.

An exercise's checks live in its folder's checks.py (see exercise.py), each
registered with `@check(points=...)`. A check function takes
`(student, rng, hidden)`: it builds its cases from `rng` (visible cases use a
fixed seed; hidden ones a seed the student cannot know) and calls the student
only through `student.call`. It returns nothing when the student is right and
raises CheckFailure saying what is wrong otherwise. A check that needs a GPU calls
`require_gpu()` first: without one it is skipped, neither passed nor failed.
"""

import importlib
import os
import re
import secrets
import statistics
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from . import plain
from .exercise import exercise_of_module, find
from .compare import CheckFailure, CheckSkipped, assert_close, assert_format, describe, redacted, unredacted
from .student import Student

SEED_ENV = "AISYS_GRADING_SEED"  # the instructor's secret seed for hidden cases


@dataclass(frozen=True)
class Check:
    exercise: str
    name: str
    points: float
    function: Callable[[Student, np.random.Generator, bool], None]

    @property
    def description(self) -> str:
        """The docstring's first paragraph, on one line (a long one wraps in the source)."""
        return " ".join((self.function.__doc__ or self.name).strip().split("\n\n")[0].split())


@dataclass(frozen=True)
class Result:
    """What a check found: passed, failed (the message says how), or skipped (it cannot run here). `run` gives one
    run's; the grading engine keeps one per check for its visible then hidden runs (engine._run_check)."""

    check: Check
    hidden: bool  # whether the cases judged were hidden ones: hidden data then reached the student's code
    passed: bool
    message: str
    skipped: bool = False  # the check could not run here (it needs a GPU): neither passed nor failed
    optional: bool = False  # skipped, and the notebook is graded without it: its points are left out

    def __post_init__(self):
        if self.passed and self.skipped:
            raise ValueError("a check result is passed or skipped, not both")
        if self.optional and not self.skipped:
            raise ValueError("only a skipped check result is optional")

    @property
    def failed(self) -> bool:
        return not (self.passed or self.skipped)

    @property
    def score(self) -> float:
        return self.check.points if self.passed else 0.0

    def record(self) -> dict:
        """The result as a grade report keeps it (plain data: the check by its name and points)."""
        return {"name": self.check.name, "points": self.check.points, "passed": self.passed, "message": self.message,
                "skipped": self.skipped, "optional": self.optional}


_REGISTRY: dict[str, dict[str, Check]] = {}


def check(points: float, *, exercise: str | None = None):
    """Register the decorated function as a check named after the function, of the exercise whose checks.py
    defines it (a test registering checks elsewhere names its `exercise`)."""
    if not (isinstance(points, (int, float)) and not isinstance(points, bool) and points > 0):
        raise ValueError(f"points must be a number > 0, got {points!r}")

    def register(function):
        owner = exercise or exercise_of_module(function.__module__)
        checks = _REGISTRY.setdefault(owner, {})
        if function.__name__ in checks:
            raise ValueError(f"exercise {owner!r} already has a check named {function.__name__!r}")
        checks[function.__name__] = Check(owner, function.__name__, float(points), function)
        return function

    return register


def checks_for(exercise: str) -> dict[str, Check]:
    """The checks of an exercise, by name, in the order they are defined."""
    if exercise not in _REGISTRY:
        importlib.import_module(find(exercise).module)
    return _REGISTRY.get(exercise, {})


def rng_for(check: Check, hidden: bool, seed: int | None = None) -> np.random.Generator:
    """Visible cases: a fixed generator per check. Hidden: from `seed`, else AISYS_GRADING_SEED, else fresh entropy."""
    stream = zlib.crc32(f"{check.exercise}/{check.name}".encode())
    if not hidden:
        return np.random.default_rng([0, stream])
    if seed is None:
        seed = int(os.environ[SEED_ENV]) if os.environ.get(SEED_ENV) else secrets.randbits(63)
    return np.random.default_rng([seed, stream])


def run(check: Check, student: Student, *, hidden: bool, seed: int | None = None) -> Result:
    """Run one check; a wrong answer is a failed Result, one that cannot run here a skipped Result
    ("skipped: needs a GPU (...)"), and a bug in the check itself propagates."""
    try:
        with redacted(hidden):
            check.function(student, rng_for(check, hidden, seed), hidden)
    except CheckFailure as failure:
        return Result(check, hidden, False, str(failure))
    except CheckSkipped as skip:
        return Result(check, hidden, False, f"skipped: {skip}", skipped=True, optional=skip.optional)
    return Result(check, hidden, True, "")


def require_gpu(*, cupy: bool = False, gpus: int = 1, optional: bool = False) -> None:
    """Skip the calling check unless aisys runs on a CUDA GPU here (with `cupy`, one CuPy can use;
    with `gpus`, at least that many: one per rank of a collective over NCCL).

    Call it first thing in a check: it raises CheckSkipped, which `run` turns into a result that
    neither passes nor fails, the notebook prints as skipped, and the grading engine records no
    grade for (the notebook waits for a run on a machine with a GPU). With `optional` (a speed
    check: what it measures exists only on a GPU; or a collective's NCCL run, whose code the gloo
    checks grade on a CPU) the engine grades the notebook all the same, this check's points left
    out. The decision is the grader's, from this process: AISYS_DEVICE=cpu skips even where a GPU
    exists.
    """
    from aisys import cuda_c, device

    try:
        on_gpu = device.current() == "cuda"
    except RuntimeError as error:  # AISYS_DEVICE=cuda on a machine without one
        raise CheckSkipped(f"needs a GPU ({error})", optional) from None
    if not on_gpu:
        why = f"{device.ENV}=cpu" if device.requested() == "cpu" else "no CUDA GPU found"
        raise CheckSkipped(f"needs a GPU ({why})", optional)
    if cupy and (problem := cuda_c.cupy_problem()):
        raise CheckSkipped(f"needs a GPU with CuPy ({problem})", optional)
    if gpus > 1:
        import torch

        if (count := torch.cuda.device_count()) < gpus:
            raise CheckSkipped(f"needs {gpus} GPUs (found {count})", optional)


def case_on_ranks(outcomes: list[list[dict]], case: int, where: str, explain: Callable | None = None) -> list[dict]:
    """Case `case`'s outcome on every rank, from `Student.call_ranks`; CheckFailure headed by `where` when that case
    did not run (an earlier one failed) or a rank raised in it. The rank named is the one that failed first on its
    own account, not a peer that saw it close its links; `explain(rank, error)` words its error (by default
    "rank r raised ...", what the student's code raised shown only where no hidden data can be in it)."""
    from aisys.collectives.launch import first_cause

    from .compare import raised

    if case >= len(outcomes):
        raise CheckFailure(f"{where}: did not run (an earlier case failed)")
    errors = [(rank, outcome["error"]) for rank, outcome in enumerate(outcomes[case]) if outcome.get("error")]
    if errors:
        rank, error = first_cause(errors)
        raise CheckFailure(f"{where}: " + (explain(rank, error) if explain else f"rank {rank} raised {raised(error)}"))
    return outcomes[case]


def raises_value_error(student: Student, function: str, why: str, *, naming: str | None = None, **case) -> None:
    """CheckFailure unless `function(**case)` raises ValueError, whose message names `naming` where one is given
    (judged only where the message is shown: a redacted run withholds it). `why` says what makes the case invalid."""
    __tracebackhide__ = True
    call = f"{function}({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"
    try:
        value = student.call(function, returns="any", **case)
    except CheckFailure as failure:
        text = str(failure)
        if "raised ValueError" not in text:
            raise CheckFailure(f"{call}: {failure}; it should raise ValueError: {why}") from None
        if naming and "not shown here" not in text and naming not in text.split("raised ValueError", 1)[1]:
            raise CheckFailure(f"{call} raised ValueError, but its message does not name `{naming}`: {why}") from None
        return
    raise CheckFailure(f"{call} returned {describe(value)}; it should raise ValueError: {why}")


def compare_timed(student: Student, function: str, make_case: Callable[[np.random.Generator], dict],
                  reference: Callable, rng: np.random.Generator, *, returns: str, repeats: int = 5,
                  slowdown: float = 10.0, allowance: float = 0.02) -> None:
    """Time `function` from the grader's side, on fresh inputs every repetition, against `reference`.

    Fresh inputs defeat memoising; every result must also be right. Both sides are timed on the
    same kind of clock: CPU seconds where the grader can count the student's (see
    `Student.cpu_clock`), so neither a busy machine nor a classmate graded alongside changes the
    verdict; else wall seconds. Passes when the median time is within `slowdown` times the
    reference's median plus `allowance` seconds (which covers carrying the inputs across the
    bridge): when most runs are not over that budget.
    """
    __tracebackhide__ = True
    clock, unit = (time.process_time, "CPU ms") if student.cpu_clock else (time.perf_counter, "ms")
    cases = [make_case(rng) for _ in range(repeats)]
    expected, theirs = [], []
    for case in cases:
        start = clock()
        expected.append(plain.to_plain(reference(**case)))
        theirs.append(clock() - start)
    budget = slowdown * statistics.median(theirs) + allowance
    mine = []
    for i, case in enumerate(cases):
        value, seconds = student.timed_call(function, returns=returns, **case)
        try:
            assert_close(value, expected[i])
        except CheckFailure as failure:
            raise CheckFailure(f"timed run {i + 1} of {repeats}: {function}: {failure}") from None
        mine.append(seconds)
        if sum(t > budget for t in mine) > repeats // 2:
            break  # most runs are over budget, so the median is: no need to wait for the rest
    slow = sum(t > budget for t in mine)
    if slow > repeats // 2:
        # times are not data, but a hidden case's message shows no number its watcher could take for one
        times = unredacted(f" of {budget * 1e3:.1f} {unit} ({slowdown:g} x the reference's "
                           f"{statistics.median(theirs) * 1e3:.2f} {unit} + {allowance * 1e3:.0f} {unit}); "
                           f"the slowest took {max(mine) * 1e3:.1f} {unit}",
                           " (a multiple of the reference's time)")
        raise CheckFailure(f"{function} is too slow: {slow} of {repeats} runs on fresh inputs took longer than the "
                           f"budget{times}")


TOO_BIG = ("MemoryError", "OverflowError", "did not return within")  # how code that grows with the size may fail


def compare_cases(student: Student, function: str, cases: Iterable[dict], reference: Callable, *, returns: str,
                  hidden: bool, tolerance=None, dtype: str | Callable[[dict], str] | None = None,
                  hint: Callable | None = None, compare: Callable | None = None,
                  call: Callable[[dict], str] | None = None, budget: float | None = None,
                  slow: str | Callable[[dict], str] = "") -> None:
    """Call `function` on each case (keyword arguments) and compare with `reference(**case)` as plain data; the first
    case that differs fails the check, with a message naming the case, the call and what differed.

    tolerance   (rtol, atol) for every case, or a function of the case giving them; None, for either or both, takes
                the default of the expected value's dtype (compare.tolerance)
    dtype       the result's format, which assert_close (values only) does not compare: "reference" (an array of
                the reference's dtype), a format or dtype name as compare.assert_format takes ("bf16", "int32"), or
                a function of the case giving one
    hint        hint(case, got, expected): what such a difference usually means, added to the message of a wrong
                result ("" when there is nothing to add), never to an error the student's code raised; like every
                message, it quotes a case's values only through compare.shown or unredacted
    compare     compare(got, expected, case), raising CheckFailure, instead of the comparison above: for a result
                judged piece by piece
    call        call(case): how a message names the call, instead of function(argument=describe(value), ...)
    budget      seconds each call may take, on the clock of Student.timed_call, for a lesson that is a formula: with
                cases of growing size (each a few times the last, the last beyond any loop), code whose time grows
                with the size (a loop over every tile) fails at the first case over budget, long before the last;
                `slow` (or slow(case), which may call the student's helpers to say which one is slow) says, in one
                sentence, what the better way is
    """
    __tracebackhide__ = True
    cases = list(cases)

    def why_slow(case) -> str:
        return slow(case) if callable(slow) else slow
    for i, case in enumerate(cases, 1):
        named = call(case) if call else f"{function}({', '.join(f'{k}={describe(v)}' for k, v in case.items())})"
        label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)}: {named}"
        expected = plain.to_plain(reference(**case))
        try:
            got, seconds = (student.timed_call(function, returns=returns, **case) if budget is not None
                            else (student.call(function, returns=returns, **case), 0.0))
        except CheckFailure as failure:
            too_big = budget is not None and any(sign in str(failure) for sign in TOO_BIG)
            why = why_slow(case) if too_big else ""
            raise CheckFailure(f"{label}: {failure}" + (f". {why}" if why else "")) from None
        try:
            if compare is not None:
                compare(got, expected, case)
            else:
                rtol, atol = (tolerance(case) if callable(tolerance) else tolerance) or (None, None)
                wanted = dtype(case) if callable(dtype) else dtype
                if wanted == "reference" and isinstance(expected, np.ndarray):
                    wanted = expected.dtype.name
                if wanted not in (None, "reference"):
                    assert_format(got, wanted)
                assert_close(got, expected, rtol=rtol, atol=atol)
        except CheckFailure as failure:
            more = hint(case, got, expected) if hint else ""
            raise CheckFailure(f"{label}: {failure}" + (f". {more}" if more else "")) from None
        if budget is not None and seconds > budget:
            unit = "CPU s" if student.cpu_clock else "s"
            took = unredacted(f"{seconds:.2f} {unit}", "longer")  # a time, not data, but printed as a number
            raise CheckFailure(f"{label}: right, but a call may take {budget:g} {unit} at any size, and this one "
                               f"took {took}: {why_slow(case)}")


def compare_property(student: Student, function: str, cases, reference: Callable, *, rng: np.random.Generator,
                     returns: str, hidden: bool, examples: int = 40, **compare) -> None:
    """Cases drawn by `cases`, a hypothesis strategy of keyword-argument dicts, each compared as compare_cases does
    (its keyword arguments pass through in `compare`); a failing case is shrunk to the smallest that still fails, and
    that one fails the check. The draws follow `rng` (so the check's seed), and nothing is stored between runs."""
    __tracebackhide__ = True
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis.errors import FlakyFailure, HypothesisException

    @seeded(int(rng.integers(2**63)))
    @settings(max_examples=examples, database=None, deadline=None, phases=(Phase.generate, Phase.shrink),
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False)
    @given(cases)
    def holds(case):
        compare_cases(student, function, [case], reference, returns=returns, hidden=hidden, **compare)

    try:
        holds()
    except CheckFailure as failure:
        case = re.sub(r"^(hidden )?case 1 of 1: ", "", str(failure))
        raise CheckFailure(f"the smallest failing case found: {case}") from None
    except (FlakyFailure, HypothesisException) as error:  # the same input passed once and failed once
        raise CheckFailure(f"{function} gave different results for the same input on different calls "
                           f"({type(error).__name__}): it must depend on its arguments alone") from None
