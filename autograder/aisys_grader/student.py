"""The one way checks reach student code: call a named function with plain data, get plain data back.

`Student` is the interface. `InProcessStudent` implements it over a notebook's
namespace, for a student's self-check in JupyterLab; `kernel.KernelStudent`
implements it across the process boundary into a sandboxed grading kernel. Both
run the same `bridge.reply` next to the student's code and read its reply with
`value_from_reply`, so a check behaves the same either way.

`profiled_call`, `traced_call` and `call_ranks` grade how code runs, which the student's own process
cannot be trusted to report: they run the student's definitions again, from the source
of the cells run so far, in the clean room (cleanroom.py), which replies in the same
format. Both students use the same clean room: in the notebook's process for a
self-check; when grading, in a sandboxed process of its own that runs each call in a
fresh process.
"""

import re
import time
from typing import Any, Protocol

from . import bridge, cleanroom, plain
from .compare import CheckFailure, exception_name, raised, redacting, unredacted


class Student(Protocol):
    def call(self, function: str, *args, returns: str = "any", **kwargs) -> Any:
        """Call the student's `function` and return its result as plain data of kind `returns`.

        Raises CheckFailure when the function is missing, not implemented, raises, or returns
        something that is not plain data of that kind.
        """

    cpu_clock: bool
    """Whether `timed_call` counts CPU seconds of the student's processes (else wall seconds)."""

    def timed_call(self, function: str, *args, returns: str = "any", **kwargs) -> tuple[Any, float]:
        """`call`, and the seconds it took as measured by the grader (inputs and result included): CPU seconds
        of every process of the student's where `cpu_clock` says so, so a busy machine changes nothing."""

    def repeated_call(self, function: str, plan: dict) -> tuple[dict, float]:
        """Run `function` in the timing loop of reps.py with `plan`, next to the student's code: its reply (a mapping,
        untrusted) and the wall seconds the whole call took on the grader's clock (speed.py)."""

    def profiled_call(self, function: str, *args, returns: str = "any", dialect: str = "simt",
                      generated: str | None = None, **kwargs) -> tuple[Any, list[dict]]:
        """`call` in the clean room, with kernels run in the SIMT simulator (or, with dialect="triton", in Triton's
        interpreter): the value and one report (plain dict) per launch. The function and what it uses must be
        written in that dialect (grammar.SIMT, grammar.TRITON).

        `generated` is source that the student's code wrote (a code generator's output, obtained with `call`): it
        runs as one more cell after the notebook's, under the same grammar, so generated code is graded where and
        as the student's own kernels are, never in the grader or in the student's process."""

    def traced_call(self, function: str, *args, returns: str = "any", **kwargs) -> tuple[Any, dict]:
        """`call` in the clean room, under tracemalloc: the value and the call's trace, {"peak_bytes": its peak of
        memory allocated above what was held when it began, "calls": {name: times called} of each function the
        notebook defines}. The function and what it uses must be written in numpy (grammar.TRACED)."""

    def call_ranks(self, function: str, cases: list, *, world_size: int, backend: str = "gloo",
                   timeout: float = 5.0, wall_timeout: float = 30.0, harness: str | None = None) -> list[list[dict]]:
        """Call the student's `function` on `world_size` real processes in one process group, case after case.

        `cases[i][rank]` is the argument list of that rank in case i; numpy arrays arrive as torch
        tensors (on GPU `rank` with NCCL). The result has one list per case that ran, of one dict
        per rank: "value" (what it returned), "tensors" (its tensor arguments after the call, as
        arrays), "messages" (the point-to-point messages it posted, see aisys.collectives.traffic;
        a collective raises there), "error" (None, or 'Type: message') and "unfinished" (None, or
        why the ranks could not meet after the call). Cases stop after the first one in which any
        rank raised. CheckFailure if the ranks died or hung (`timeout` bounds each receive,
        `wall_timeout` the whole run), if every rank of a case returned but left a message
        unfinished, or if `function` is missing or not implemented.
        The ranks run in the clean room: the function and what it uses must be written in the
        dialect of grammar.RANKS.

        With `harness` (the dotted path of a trusted function in a module of the exercise's
        student_may_import), each rank calls `harness(definitions, *args)` instead, where
        `definitions["name"]` is the student's function of that name (NameError if there is none):
        the harness drives the student's functions (builds the model, calls them where training
        would), records what the check needs, collectives included, and returns it as "value";
        "messages" is then empty and collectives are allowed. `function` is still the one whose
        absence or NotImplementedError the result reports.
        """


def payload(args: tuple, kwargs: dict) -> str:
    """Arguments in the wire format: a fresh copy the student can neither mutate nor keep."""
    return plain.encode([list(args), kwargs])


def value_from_reply(function: str, reply, returns: str):
    """The value a bridge reply carries, re-checked as plain data of kind `returns`; CheckFailure otherwise."""
    __tracebackhide__ = True
    status = reply.get("status") if isinstance(reply, dict) else None
    if status == "ok" and isinstance(reply.get("value"), str):
        try:
            return plain.require(plain.decode(reply["value"]), returns, f"the result of `{function}`")
        except plain.NotPlain as error:
            raise CheckFailure(str(error)) from None
        except (ValueError, TypeError, KeyError):
            pass  # malformed: falls through to the message below
    elif status == "not_defined":
        raise CheckFailure(f"`{function}` is not defined: run the cell that defines it first")
    elif status == "not_implemented":
        where = reply.get("where")  # a name the student's process gives: hidden data could be spelled in it
        if redacting() and where != function:
            raise CheckFailure(f"`{function}`, or a function it calls, is not implemented yet (it raises "
                               "NotImplementedError)")
        if isinstance(where, str) and re.fullmatch(r"[\w.]{1,100}", where) and where != function:
            raise CheckFailure(f"`{function}` calls `{where}`, which is not implemented yet (it raises "
                               "NotImplementedError)")
        raise CheckFailure(f"`{function}` is not implemented yet (it raises NotImplementedError)")
    elif status == "raised" and redacting():  # what the student's code says may carry hidden data
        raise CheckFailure(f"`{function}` raised {exception_name(reply.get('error'))} (its message is not shown "
                           "here: it could carry the hidden data)")
    elif status == "raised":
        where = reply.get("where")
        at = f" ({str(where)[:300]})" if where and isinstance(where, str) else ""
        raise CheckFailure(f"`{function}` raised {reply.get('error')}: {reply.get('message')}{at}")
    elif status == "not_plain":
        raise CheckFailure("the result is not plain data" if redacting() else str(reply.get("message"))[:2000])
    elif status == "refused":  # the clean room does not run a definition the call needs (grammar.py says why)
        raise CheckFailure(str(reply.get("message"))[:2000])
    raise CheckFailure(f"calling `{function}` gave no readable result")


def trace_from_reply(function: str, reply) -> dict:
    """The trace a traced call's reply carries, re-checked: a peak in bytes and a count of calls per name."""
    __tracebackhide__ = True
    try:
        trace = plain.require(plain.decode(reply["trace"]), "mapping", "a trace")
        calls = plain.require(trace["calls"], "mapping", "the calls traced")
        if isinstance(trace["peak_bytes"], int) and all(isinstance(n, int) for n in calls.values()):
            return {"peak_bytes": trace["peak_bytes"], "calls": calls}
    except (plain.NotPlain, ValueError, TypeError, KeyError):
        pass
    raise CheckFailure(f"calling `{function}` gave no readable trace")


def launches_from_reply(function: str, reply) -> list[dict]:
    """The simulator's launch reports a profiled call's reply carries, re-checked as a list of mappings."""
    __tracebackhide__ = True
    try:
        launches = plain.require(plain.decode(reply["launches"]), "list", "launch reports")
        return [plain.require(r, "mapping", "a launch report") for r in launches]
    except (plain.NotPlain, ValueError, TypeError, KeyError):
        raise CheckFailure(f"calling `{function}` gave no readable kernel launch reports") from None


class BridgeStudent:
    """call, timed_call and repeated_call through `_reply` (the student's own namespace or kernel: a bridge reply and
    its seconds); profiled_call, traced_call and call_ranks through `_room` (the clean room's reply to a
    cleanroom.request)."""

    cpu_clock = False

    def call(self, function: str, *args, returns: str = "any", **kwargs) -> Any:
        __tracebackhide__ = True
        return self.timed_call(function, *args, returns=returns, **kwargs)[0]

    def timed_call(self, function: str, *args, returns: str = "any", **kwargs) -> tuple[Any, float]:
        __tracebackhide__ = True
        reply, seconds = self._reply(function, payload(args, kwargs), returns)
        return value_from_reply(function, reply, returns), seconds

    def repeated_call(self, function: str, plan: dict) -> tuple[dict, float]:
        __tracebackhide__ = True
        start = time.perf_counter()
        reply, _ = self._reply(function, payload((plan,), {}), "mapping", "reps")
        seconds = time.perf_counter() - start
        return value_from_reply(function, reply, "mapping"), seconds

    def profiled_call(self, function: str, *args, returns: str = "any", dialect: str = "simt",
                      generated: str | None = None, **kwargs) -> tuple[Any, list[dict]]:
        __tracebackhide__ = True
        if generated is not None and not isinstance(generated, str):
            raise CheckFailure(f"the generated source is a {type(generated).__name__}, not a string of code")
        reply = self._room(function, dialect, payload(args, kwargs), returns,
                           generated=() if generated is None else (generated,))
        return value_from_reply(function, reply, returns), launches_from_reply(function, reply)

    def traced_call(self, function: str, *args, returns: str = "any", **kwargs) -> tuple[Any, dict]:
        __tracebackhide__ = True
        reply = self._room(function, "traced", payload(args, kwargs), returns)
        return value_from_reply(function, reply, returns), trace_from_reply(function, reply)

    def call_ranks(self, function: str, cases: list, *, world_size: int, backend: str = "gloo",
                   timeout: float = 5.0, wall_timeout: float = 30.0, harness: str | None = None) -> list[list[dict]]:
        __tracebackhide__ = True
        ranks = {"world_size": world_size, "backend": backend, "timeout": timeout, "wall_timeout": wall_timeout,
                 "harness": harness}
        reply = self._room(function, "ranks", payload((cases,), {}), "list", ranks)
        if isinstance(reply, dict) and reply.get("status") == "ranks_failed":
            raise CheckFailure(f"`{function}` did not finish on every one of {world_size} ranks: {ranks_failed(reply)}")
        per_case = value_from_reply(function, reply, "list")
        try:
            per_case = [[plain.require(outcome, "mapping", "a rank's outcome") for outcome in
                         plain.require(case, "list", "a case's outcomes")] for case in per_case]
        except plain.NotPlain as error:
            raise CheckFailure(str(error)) from None
        for i, outcomes in enumerate(per_case):
            stuck = [rank for rank, o in enumerate(outcomes) if o.get("unfinished")]
            if stuck and not any(o.get("error") for o in outcomes):
                raise CheckFailure(
                    f"`{function}` on {world_size} ranks, case {i + 1} of {len(cases)}: every rank returned, but "
                    f"then rank{'s' * (len(stuck) > 1)} {', '.join(map(str, stuck))} timed out in the grader's "
                    "barrier after the case: a message was left unfinished. A receive posted with dist.irecv (or "
                    "batch_isend_irecv) and never waited on, or a send that no rank received, is still pending when "
                    "the function returns: wait on every request before returning")
        return per_case


def ranks_failed(reply: dict) -> str:
    """The clean room's account of ranks that died, hung or could not start (cleanroom._ranks_failed), worded
    by the launcher: what the student's code wrote (an error's message, a dying rank's last output) only outside
    `redacted()`."""
    from dataclasses import replace

    from aisys.collectives.launch import Outcome, RanksFailed

    try:
        outcomes = [Outcome(int(o["rank"]), str(o["status"]), error=str(o["error"]), output=str(o["output"]))
                    for o in reply["outcomes"]]
        first = reply["first"] if reply["first"] in range(len(outcomes)) else None
    except (TypeError, KeyError, ValueError):
        return "the grader could not read what its ranks did"
    withheld = "(not shown here: it could carry the hidden data)"
    shown = [replace(o, error=raised(o.error) if o.status == "raised" else o.error,
                     output=unredacted(o.output, withheld) if o.output else "") for o in outcomes]
    return str(RanksFailed(shown, first))


class InProcessStudent(BridgeStudent):
    """Student code living in a namespace of this process (a notebook's globals). Its clean room runs here too, on
    the cells IPython keeps in the namespace's `In` (the source of each cell run, in order)."""

    cpu_clock = True

    def __init__(self, namespace: dict, exercise: str | None = None):
        self.namespace = namespace
        self.exercise = exercise  # for the aisys modules its check module lets students import

    def _reply(self, function: str, data: str, returns: str, harness: str | None = None):
        start = time.process_time()
        reply = bridge.reply(self.namespace, function, data, returns, harness)
        return reply, time.process_time() - start

    def _room(self, function: str, dialect: str, data: str, returns: str, ranks: dict | None = None,
              generated: tuple[str, ...] = ()) -> dict:
        __tracebackhide__ = True
        sources = self.namespace.get("In")
        if not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
            raise CheckFailure(f"`{function}` is graded from the source of your notebook's cells, which IPython "
                               "keeps in `In`; run this check in a notebook (Jupyter or IPython)")
        return cleanroom.reply(cleanroom.request([*sources, *generated], dialect, function, data, returns,
                                                 modules=cleanroom.student_may_import(self.exercise), ranks=ranks))
