"""Reading the SIMT simulator's launch reports in checks: the student's launches, their errors, lines and totals.

A launch report is the plain dict of one kernel launch (aisys.simt's report,
`to_plain()`): its "kernel", "grid", "block" and "threads"; counters per
space ("global", "shared", "branches", "atomics"); its "errors" (races,
barrier and warp errors, each with a "kind", "line", "count" and "message");
and its "lines", one per source line and space with that line's counters.
"""

from collections.abc import Callable
from typing import Any

from aisys import simt

from .compare import CheckFailure


def profiled(student, function: str, *args, returns: str = "any", **kwargs) -> tuple[Any, list[dict]]:
    """`student.profiled_call`: the value and the launch reports; CheckFailure if no kernel was launched."""
    __tracebackhide__ = True
    value, launches = student.profiled_call(function, *args, returns=returns, **kwargs)
    if not launches:
        raise CheckFailure(f"`{function}` launched no kernel: it must do its work on the GPU, in kernels launched "
                           f"with `kernel[blocks, threads](...)`")
    return value, launches


def reference_launches(function: Callable, *args, **kwargs) -> list[dict]:
    """The launch reports (plain dicts) of a reference function run under `simt.profile()`."""
    with simt.profile() as launches:
        function(*args, **kwargs)
    return [launch.to_plain() for launch in launches]


def first_error(launches) -> tuple[str, dict] | None:
    """(kernel, error) of the first error: barrier and warp errors (the causes) before races (their effects)."""
    errors = [(launch["kernel"], error) for launch in launches for error in launch["errors"]]
    return min(errors, key=lambda item: (item[1]["kind"] == "race", item[1]["line"]), default=None)


def errors_message(launches) -> str | None:
    """The first error as a sentence, with how many more there are; None when the reports have no error."""
    first = first_error(launches)
    if first is None:
        return None
    kernel, error = first
    others = sum(len(launch["errors"]) for launch in launches) - 1
    more = f" (and {others} more error{'s' * (others > 1)})" if others else ""
    times = "once" if error["count"] == 1 else f"{error['count']} times"
    return (f"kernel {kernel} had a {error['kind']} error at line {error['line']}, {times}{more}: "
            f"{error['message'].rstrip('.')}")


def lines(launches, space: str, kind: str | None = None) -> list[dict]:
    """The report lines of one space ("global", "shared", "branch"), of one kind ("load", "atomic", ...) if given."""
    return [line for launch in launches for line in launch["lines"]
            if line["space"] == space and kind in (None, line["kind"])]


def where(line: dict) -> str:
    """A report line as a student finds it: "line N `source`"."""
    return f"line {line['line']} `{line['source'].strip()}`"


def total(launches, space: str, key: str) -> int:
    """A counter of one space summed over the launches, e.g. total(launches, "shared", "bank_conflicts")."""
    return sum(launch[space][key] for launch in launches)


def efficiency(launches) -> float:
    """Global-memory efficiency: the sectors the data needs over the sectors moved (1.0 when none moved)."""
    sectors = total(launches, "global", "sectors")
    return total(launches, "global", "ideal_sectors") / sectors if sectors else 1.0


def least_efficient(launches) -> dict:
    """The global-memory line with the lowest efficiency (ideal sectors over sectors moved)."""
    return min((line for line in lines(launches, "global") if line["sectors"]),
               key=lambda line: line["ideal_sectors"] / line["sectors"])
