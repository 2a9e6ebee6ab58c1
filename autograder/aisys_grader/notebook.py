"""Checks inside a student's notebook: the same checks, run in-process for self-checking.

A check that cannot run here (a GPU-only check on a laptop) prints "skipped: needs a GPU (...)"
and lets the notebook go on: it neither passed nor failed.
"""

from .checks import checks_for, run
from .compare import CheckFailure
from .student import InProcessStudent


def checker(exercise: str, namespace: dict):
    """A `check(name, hidden=False)` function bound to the notebook's namespace (pass `globals()`)."""
    checks = checks_for(exercise)
    student = InProcessStudent(namespace, exercise)

    def check(name: str, hidden: bool = False) -> None:
        __tracebackhide__ = True
        if name not in checks:
            raise KeyError(f"exercise {exercise!r} has no check {name!r}; it has {', '.join(checks)}")
        result = run(checks[name], student, hidden=hidden)
        cases = f"{name} ({'hidden' if hidden else 'visible'} cases)"
        if result.skipped:  # e.g. a GPU-only check on a laptop: not a failure, and nothing was checked
            print(f"{result.message}: {cases} not checked")
        elif not result.passed:
            raise CheckFailure(result.message)
        else:
            print(f"passed: {cases}")

    return check
