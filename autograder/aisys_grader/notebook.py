"""Checks inside a student's notebook: the same checks, run in-process for self-checking."""

from .checks import checks_for, run
from .compare import CheckFailure
from .student import InProcessStudent


def checker(exercise: str, namespace: dict):
    """A `check(name, hidden=False)` function bound to the notebook's namespace (pass `globals()`)."""
    checks = checks_for(exercise)
    student = InProcessStudent(namespace)

    def check(name: str, hidden: bool = False) -> None:
        __tracebackhide__ = True
        if name not in checks:
            raise KeyError(f"exercise {exercise!r} has no check {name!r}; it has {', '.join(checks)}")
        result = run(checks[name], student, hidden=hidden)
        if not result.passed:
            raise CheckFailure(result.message)
        print(f"passed: {name} ({'hidden' if hidden else 'visible'} cases)")

    return check
