"""The clean room: a student's definitions, run again from their source, where nothing else of theirs runs.

A check that grades how code runs, not only what it returns, must not trust anything
computed in the student's own process: a kernel's launch reports (aisys.simt) or the
messages a rank posted (aisys.collectives.traffic) are made by code the student could
patch there. So `Student.profiled_call` and `Student.call_ranks` do not call into the
student's kernel. They send the clean room a request: the source of the notebook's code
cells run so far, in order, the dialect, the function's name and the grader's plain-data
arguments. The clean room keeps each cell's top-level definitions (imports, `def`s,
assignments to names; later ones override earlier ones), refuses those outside the
dialect's grammar (grammar.py), runs the rest in a fresh namespace whose builtins are the
dialect's, and calls the function:

- "simt": under `aisys.simt.profile()`; the reply carries the value and one report per launch;
- "triton": Triton kernels run in its interpreter, on the CPU's tensors, wherever the room runs (also where the
  notebook's kernels are compiled for a GPU), under `aisys.triton_interpreter.launches()`; the reply carries the
  value and one report per launch (its programs, loads, stores, tl.dots);
- "ranks": on real processes (`aisys.collectives.launch.run_ranks`), each rank recording its
  messages with `aisys.collectives.traffic.record` around the call; the reply carries what each
  rank did. Under NCCL the recorder sees each message as posted to the process group (its
  peer, dtype and size), not the bytes on the wire. With a harness (`ranks["harness"]`, the
  dotted path of a trusted function in aisys), each rank calls the harness instead, giving it
  the student's definitions: it builds the model, calls the student's functions where
  training would, records what it needs to (collectives, with its own marks between them)
  and returns what the check reads.
- "traced": numpy code under `tracemalloc`, each function the cells define counted as it is
  called; the reply carries the value and the call's trace: its peak of memory allocated
  (bytes, above what was held when it began) and how many times each function ran.

Only code that passed the grammar runs there, and the grammar admits no way to reach the
simulator's counters or the recorder (no attribute outside the dialect, no name starting with
`_`, no imports beyond the dialect's), so what the reply reports is observed out of the
student's reach. Replies use the bridge's format (bridge.reply), read with
student.value_from_reply and student.launches_from_reply.

Where it runs: when grading, `SandboxedRoom` starts one sandboxed process per notebook
(`python -m aisys_grader.cleanroom`: a JSON request per line on stdin, a JSON reply per line
on stdout), which never runs student code itself: it forks a fresh process for each call
and kills it, with the ranks it started, at the call's time limit. (A sandbox per call cost
2 s a call for collectives, most of it importing torch; forking from a room that has loaded
it costs some 0.05 s.) For a student's self-check, `reply` runs in the notebook's own
process, where there is nothing to protect, so that the student sees the grader's verdicts
(refusals included).
"""

import __future__
import ast
import builtins
import contextlib
import functools
import importlib
import json
import linecache
import os
import re
import select
import signal
import subprocess
import sys
import time
import tracemalloc
import types
from pathlib import Path

from . import grammar, plain

SOURCE_LIMIT = 2**22  # characters of cell source in one request (4 MiB)
REPLY_LIMIT = 64 * 2**20  # bytes of one bridge reply (a 2000 x 2300 float64 array is 49 MB of base64)
PACKAGE = Path(__file__).resolve().parent
ROOM_CODE = {"__init__.py": PACKAGE / "shim.py", **{name: PACKAGE / name for name in ("cleanroom.py", "grammar.py",
                                                                                        "plain.py")}}
ROOM_MODULES = ("aisys.simt", "aisys.collectives.launch", "aisys.collectives.traffic",  # what _preload loads
                "aisys.triton_interpreter")
ANNOTATIONS = __future__.annotations.compiler_flag  # annotations are kept as text: `Optional[...]` needs no typing


def request(sources: list[str], dialect: str, function: str, payload: str, returns: str, *,
            modules=(), ranks: dict | None = None) -> dict:
    """A clean-room request: plain JSON-able data, nothing of the student's but their cells' source."""
    if sum(map(len, sources)) > SOURCE_LIMIT:
        raise ValueError(f"the notebook's code cells hold more than {SOURCE_LIMIT:,} characters")
    return {"sources": list(sources), "dialect": dialect, "function": function, "payload": payload,
            "returns": returns, "modules": list(modules), "ranks": ranks}


def student_may_import(exercise: str | None) -> list[str]:
    """The aisys modules that kernels and rank functions may import here: the exercise's spec, `clean_room`."""
    if exercise is None:
        return []
    from .exercise import find  # the grader's side only: the room itself holds no exercise folders

    return list(find(exercise).spec.clean_room)


# ------------------------------------------------------------------------------------------------ running


def _resolve(path: str):
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            value = getattr(value, part)
        return value
    raise ImportError(f"no module named {parts[0]!r}")


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:500]


def definitions(sources: list[str], dialect: str, modules=()) -> tuple[dict, dict[str, str]]:
    """A fresh namespace holding the cells' definitions that pass the grammar, run in order; and, for each name
    left undefined by a refusal or an error, why."""
    # C code (torch's lazy imports) finds __import__ among the builtins of the frame that calls it; the grammar
    # refuses every name that starts with `_`, so the student's code cannot name it.
    allowed = {name: getattr(builtins, name) for name in grammar.BUILTINS} | {"__import__": builtins.__import__}
    namespace = {"__name__": "__main__", "__builtins__": allowed}
    for cell, source in enumerate(sources):  # the simulator reads a kernel's source, as it does in a notebook
        filename = f"<cell {cell}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    why: dict[str, str] = {}
    for definition in grammar.read(sources, grammar.DIALECTS[dialect], modules):
        if definition.refusal is not None and not definition.names:  # a cell that does not parse
            why[f"<cell {definition.cell}>"] = f"cell {definition.cell} could not be read: {definition.refusal}"
        if definition.refusal is not None:
            for name in definition.names:
                namespace.pop(name, None)
                why[name] = f"the grader does not run its definition: {definition.refusal}"
            continue
        try:
            if definition.imports:
                namespace.update({name: _resolve(path) for name, path in definition.imports})
            else:
                code = compile(ast.Module([definition.statement], []), f"<cell {definition.cell}>", "exec",
                               flags=ANNOTATIONS, dont_inherit=True)
                exec(code, namespace)
            for name in definition.names:
                why.pop(name, None)
        except Exception as error:  # as in a notebook: the cell's other definitions still count
            for name in definition.names:
                if name not in namespace:
                    why[name] = f"line {definition.line} of its cell raised {_first_line(error)} when the grader ran it"
    return namespace, why


def _missing(error: BaseException, why: dict[str, str]) -> str | None:
    """Why a name that `error` says is not defined is missing, if the clean room left it out."""
    while error is not None:
        match = re.search(r"name '(\w+)' is not defined", str(error))
        if isinstance(error, NameError) and match and match.group(1) in why:
            return f"`{match.group(1)}` is not defined: {why[match.group(1)]}"
        error = error.__cause__ or error.__context__
    return None


ROOM_PROCESS_TIMEOUT = 120.0  # seconds a call may take in a notebook's own room process (_reply_in_room_process)


def reply(request: dict) -> dict:
    """Run a request (see `request`) in this process, a notebook's, in a fresh namespace, and answer in the bridge's
    reply format; or in a room process of its own where this one cannot run it (`_reply_in_room_process`)."""
    if request["dialect"] == "triton" and _triton_compiled_here():
        return _reply_in_room_process(request)
    if request["dialect"] == "ranks" and _gpus_visible():
        return _reply_in_room_process(request)
    return _reply_here(request)


def _reply_here(request: dict) -> dict:
    """Run a request in this process: a notebook's that can, or the room's own (`main`), which always can."""
    if request["dialect"] == "triton":  # its kernels are defined (triton.jit) and launched in the interpreter
        from aisys import triton_interpreter

        with triton_interpreter.interpreting():
            return _reply(request)
    return _reply(request)


def _gpus_visible() -> bool:
    """Whether this process's torch sees a GPU (counted through NVML: CUDA is not initialised). There, the first
    backward pass starts autograd's threads, one per device, and a process forked after it cannot run backward
    ("Unable to handle autograd's threading in combination with fork-based multiprocessing"): ranks forked from a
    notebook that has trained anything would fail. So the ranks start from a process of their own, which never
    runs autograd before it forks them (as the sandboxed room never does)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.device_count() > 0


def _triton_compiled_here() -> bool:
    """Whether this process imported Triton for a GPU: its own library (tl.max, tl.sum: triton.jit functions made
    at import) then cannot run in the interpreter, which some versions refuse ("Cannot call @triton.jit'd outside of
    the scope of a kernel"), so the room's Triton needs a process of its own (a notebook's self-check on a GPU)."""
    language = sys.modules.get("triton.language")
    return language is not None and type(getattr(language, "max", None)).__name__ != "InterpretedFunction"


_ROOMS: dict[str, subprocess.Popen] = {}  # a notebook's own room processes, by dialect: started once, reused


def _reply_in_room_process(request: dict) -> dict:
    """`reply(request)` in the room process of this notebook (`main`, not sandboxed), started at the first such call
    and again after one it could not answer; it forks a fresh process for each call, as the sandboxed room does.
    For Triton, it interprets kernels on the CPU from its first import."""
    dialect = request["dialect"]
    process = _ROOMS.get(dialect)
    if process is None or process.poll() is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        if dialect == "triton":
            env.update(TRITON_INTERPRET="1", AISYS_DEVICE="cpu")
        process = _ROOMS[dialect] = subprocess.Popen([sys.executable, "-m", "aisys_grader.cleanroom"], env=env,
                                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                     stderr=subprocess.DEVNULL)
    answer, _, why, broken = exchange(process, request, ROOM_PROCESS_TIMEOUT, SandboxedRoom.STARTUP,
                                      SandboxedRoom.GRACE)
    if broken:
        process.kill()
        process.wait()
        del _ROOMS[dialect]
    return answer or {"status": "raised", "error": "RuntimeError", "message": why}


def _reply(request: dict) -> dict:
    dialect, function, returns = request["dialect"], request["function"], request["returns"]
    namespace, why = definitions(request["sources"], dialect, request.get("modules", ()))
    target = namespace.get(function)
    if not callable(target):
        if function in why:
            return {"status": "refused", "message": f"`{function}` could not be run by the grader: {why[function]}"}
        unreadable = [text for name, text in why.items() if name.startswith("<cell ")]
        if unreadable:
            return {"status": "refused", "message": f"`{function}` is not defined in the cells the grader ran: "
                                                    + "; ".join(unreadable)}
        return {"status": "not_defined"}
    args, kwargs = plain.decode(request["payload"])
    launches = trace = None
    try:
        if dialect == "ranks":
            result = _on_ranks(target, args[0], request["ranks"], why, namespace)
        elif dialect == "traced":
            result, trace = _traced(function, namespace, args, kwargs)
        elif dialect == "triton":
            from aisys import triton_interpreter

            with triton_interpreter.launches() as launches:
                result = target(*args, **kwargs)
        else:
            from aisys import simt

            with simt.profile() as launches:
                result = target(*args, **kwargs)
    except NotImplementedError:
        return {"status": "not_implemented"}
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: a graded call never ends the room
        if (missing := _missing(error, why)) is not None:
            return {"status": "refused", "message": f"`{function}` could not be run by the grader: {missing}"}
        if dialect == "ranks" and (failed := _ranks_failed(error)) is not None:
            return failed
        return {"status": "raised", "error": type(error).__name__, "message": str(error)[:2000]}
    try:
        answer = {"status": "ok", "value": plain.encode(plain.require(result, returns, f"the result of `{function}`"))}
    except plain.NotPlain as error:
        return {"status": "not_plain", "message": str(error)}
    if launches is not None:
        answer["launches"] = plain.encode([report.to_plain() for report in launches])
    if trace is not None:
        answer["trace"] = plain.encode(trace)
    return answer


def _traced(function: str, namespace: dict, args: list, kwargs: dict) -> tuple:
    """Call namespace[function] under tracemalloc, counting the calls of every function the cells defined: the
    value, and {"peak_bytes": the call's peak above what was held when it began, "calls": {name: count}}."""
    calls: dict[str, int] = {}

    def counted(name, defined):
        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return defined(*args, **kwargs)
        return wrapper

    for name, value in list(namespace.items()):  # the definitions find each other here, among their globals
        if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
            namespace[name] = counted(name, value)
    tracing = tracemalloc.is_tracing()  # a self-check may run where something traces already: leave it on
    if not tracing:
        tracemalloc.start()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        result = namespace[function](*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        if not tracing:
            tracemalloc.stop()
    return result, {"peak_bytes": max(peak, 0), "calls": calls}


class Definitions:
    """The student's definitions as a harness reaches them: `definitions["name"]`, the function; a name that is
    not a function of theirs raises NameError, as calling it would (so `_missing` can say why it is missing).
    `kept()` says what their code can keep between calls outside what the harness hands it."""

    def __init__(self, namespace: dict):
        self._namespace = namespace

    def __getitem__(self, name: str):
        value = self._namespace.get(name)
        if not callable(value) or name.startswith("_"):
            raise NameError(f"name '{name}' is not defined")
        return value

    def kept(self) -> dict[str, tuple]:
        """A fingerprint of the storage the student's code can reach between calls: the cells' top-level values and
        their functions' default arguments, containers opened (a few levels deep): each container's length, each
        tensor's elements and in-place version. A harness compares two fingerprints to tell whether the code kept
        something of its own outside what it was given (the grammar refuses `global`, but a module-level list
        can be appended to, and a module-level tensor written in place)."""
        import torch

        found: dict[str, tuple] = {}

        def visit(path: str, value, depth: int) -> None:
            if isinstance(value, torch.Tensor):
                found[path] = ("tensor", value.untyped_storage().nbytes(), value._version)
            elif isinstance(value, (list, tuple, set, frozenset, dict)) and depth < 4:
                found[path] = (type(value).__name__, len(value))
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for key, item in list(items)[:10_000]:
                    visit(f"{path}[{key!r}]", item, depth + 1)

        for name, value in self._namespace.items():
            if name.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, types.FunctionType):
                for i, default in enumerate((value.__defaults__ or ()) + tuple((value.__kwdefaults__ or {}).values())):
                    visit(f"{name}'s default {i}", default, 1)
            else:
                visit(name, value, 0)
        return found


def _on_ranks(target, cases: list, ranks: dict, why: dict[str, str], namespace: dict) -> list:
    """Run target, or the harness with the student's definitions, on ranks["world_size"] processes, case after
    case (see student.Student.call_ranks)."""
    from aisys.collectives import launch

    world_size, backend = ranks["world_size"], ranks["backend"]
    record = not ranks.get("harness")  # a harness records what it needs itself
    if not record:
        harness, student = _resolve(ranks["harness"]), Definitions(namespace)
        target = functools.partial(harness, student)
    per_rank = [[case[rank] for case in cases] for rank in range(world_size)]
    results = launch.run_ranks(_cases_on_one_rank, world_size,
                               [(target, mine, backend, why, record) for mine in per_rank],
                               backend=backend, timeout=ranks["timeout"], wall_timeout=ranks["wall_timeout"])
    if any(result == "not_implemented" for result in results):
        raise NotImplementedError
    return [[results[rank][i] for rank in range(world_size)] for i in range(min(map(len, results)))]


def _ranks_failed(error: BaseException) -> dict | None:
    """A launch.RanksFailed (a rank died, hung, or could not start) as a reply: what each rank did, for the
    grader to word (student.call_ranks), withholding what the student's code wrote where it must."""
    from aisys.collectives.launch import RanksFailed, first_failed

    if not isinstance(error, RanksFailed):
        return None
    return {"status": "ranks_failed", "first": first_failed(error.outcomes),
            "outcomes": [{"rank": o.rank, "status": o.status, "error": o.error[:2000], "output": o.output}
                         for o in error.outcomes]}


def _cases_on_one_rank(target, cases: list, backend: str, why: dict[str, str], record: bool) -> list | str:
    """In one rank: each case's arrays become tensors; record the messages of the call (if `record`, where only
    messages are allowed; else nothing is recorded here and collectives are let through). Stops at the first
    case that raised on this rank, and after any case that raised on another or left messages unfinished (the
    barrier between fails: its error is the case's "unfinished")."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from aisys.collectives import traffic
    from aisys.collectives.launch import error_text, rank_device

    device = rank_device(backend)
    outcomes = []
    for args in cases:
        tensors = [torch.from_numpy(a).to(device) if isinstance(a, np.ndarray) else a for a in args]
        outcome = {"value": None, "tensors": [], "messages": [], "error": None, "unfinished": None}
        try:
            with traffic.record() if record else contextlib.nullcontext(traffic.Traffic()) as recorded:
                value = target(*tensors)
            outcome["value"] = plain.to_plain(value, "the result")
            outcome["tensors"] = [plain.to_plain(t, "an argument") for t in tensors if isinstance(t, torch.Tensor)]
        except NotImplementedError:
            return "not_implemented"
        except BaseException as error:  # SystemExit too: report it as this rank's outcome
            missing = _missing(error, why)
            outcome["error"] = error_text(error) + (f" ({missing})" if missing else "")
        outcome["messages"] = [m.to_plain() for m in recorded.messages]
        outcomes.append(outcome)
        if outcome["error"]:
            break
        try:
            dist.barrier()  # keep the cases apart: no message of one case is taken by a receive of the next
        except Exception as error:
            outcome["unfinished"] = error_text(error)
            break
    return outcomes


# ------------------------------------------------------------------------------------------------ the grader's side


class SandboxedRoom:
    """The clean room when grading one notebook: a sandboxed process of its own (`main`), started at the first call
    and again after any call it failed to answer, which sees nothing of the student's kernel and, of aisys, only
    the modules of `allowed` (the exercise's student_may_import), those its dialects run (ROOM_MODULES) and what
    they import, never one of `reference` (boundary.closure). Each call runs in a fresh process. Use as a context
    manager: the room, if it was started, ends on exit."""

    STARTUP = 60.0  # seconds a room may take to load numpy, torch and aisys, before the call's own limit starts
    GRACE = 10.0  # seconds past a call's limit the grader waits for the room to say so itself

    def __init__(self, sandbox, allowed=(), reference=()):
        from .boundary import closure  # the grader's side only: the room's own copy holds no boundary.py

        self.sandbox, self.modules = sandbox, closure([*allowed, *ROOM_MODULES], reference)
        self.job = None
        self.notes: list[str] = []  # what went wrong on the host side (job.Job.notes)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """End the room and everything in it, and remove its folders."""
        if self.job is not None:
            self.job.__exit__(None, None, None)
            self.notes += self.job.notes
            self.job = None

    def _process(self) -> subprocess.Popen:
        from .job import Job

        if self.job is None:
            self.job = Job(self.sandbox, code=ROOM_CODE, modules=self.modules).__enter__()
            self.job.start([sys.executable, "-m", "aisys_grader.cleanroom"], self.job.python_environment(),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self.job.process

    def reply(self, request: dict, timeout: float) -> tuple[dict | None, float, str]:
        """Run `request` in the room: its reply (None if none came), the seconds the call took, and why no reply
        came ("" when one did). The call may take `timeout` seconds once the room is ready for it."""
        answer, seconds, why, broken = exchange(self._process(), request, timeout, self.STARTUP, self.GRACE)
        if broken:
            self.close()
        return answer, seconds, why


def exchange(process: subprocess.Popen, request: dict, timeout: float, startup: float,
             grace: float) -> tuple[dict | None, float, str, bool]:
    """One call of a room process running `main`: write the request, wait `startup` seconds for "ready" and then
    `timeout` + `grace` for the reply. Its reply (None if none came), the seconds the call took, why no reply came
    ("" when one did), and whether the process is past use (it ended, or is stuck, or answered garbage)."""

    try:
        process.stdin.write(json.dumps({**request, "timeout": timeout}).encode() + b"\n")
        process.stdin.flush()
    except BrokenPipeError:
        pass  # the room has died: said below
    out, ready, why = b"", None, ""
    deadline = time.monotonic() + startup
    while not why:
        left = deadline - time.monotonic()
        if left <= 0:
            why = (f"did not return within {timeout:g} s" if ready else
                   f"could not be run: the grader's clean room did not start within {startup:g} s")
        elif select.select([process.stdout], [], [], min(left, 1.0))[0]:
            chunk = os.read(process.stdout.fileno(), 1 << 20)
            out += chunk
            if not chunk:
                why = f"could not be run: the grader's clean room ended (exit status {_status(process)})"
            elif len(out) > REPLY_LIMIT:
                why = f"gave a result larger than {REPLY_LIMIT // 2**20} MiB"
            if ready is None and out.startswith(b"ready\n"):
                ready, out = time.monotonic(), out[len(b"ready\n"):]
                deadline = ready + timeout + grace
            if ready is not None and out.endswith(b"\n") and not why:
                break
    seconds = time.monotonic() - (ready or time.monotonic())
    if why:
        return None, seconds, why, True
    try:
        answer = json.loads(out)
    except ValueError:
        return None, seconds, "could not be run: the grader's clean room gave an unreadable reply", True
    if answer.get("status") == "timeout":
        return None, seconds, f"did not return within {timeout:g} s", False
    if answer.get("status") == "died":
        return None, seconds, f"crashed the process it ran in ({answer.get('message')})", False
    return answer, seconds, "", False


def _status(process: subprocess.Popen):
    try:
        return process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return "none yet"


def _preload(dialect: str) -> None:
    """The trusted modules a dialect's calls need, loaded once, before any call's time starts."""
    if dialect == "ranks":
        import torch  # noqa: F401

        from aisys.collectives import launch, traffic  # noqa: F401
    elif dialect == "traced":
        import numpy  # noqa: F401
    elif dialect == "triton":
        os.environ["AISYS_DEVICE"] = "cpu"  # the room interprets Triton on the CPU wherever it runs
        os.environ["TRITON_INTERPRET"] = "1"
        import torch  # noqa: F401
        import triton  # noqa: F401

        from aisys import triton_interpreter  # noqa: F401
    else:
        from aisys import simt  # noqa: F401


def _call_in_child(job: dict) -> dict:
    """`reply(job)` in a forked process of its own, killed with everything it started at job["timeout"] seconds."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.setpgid(0, 0)  # the call and its ranks: one process group, killed together
        try:
            answer = json.dumps(_reply_here(job))
        except BaseException as error:  # the room's own failure, said as the bridge says a failed call
            answer = json.dumps({"status": "raised", "error": type(error).__name__,
                                 "message": f"in the grader's clean room: {str(error)[:2000]}"})
        with os.fdopen(write, "w") as pipe:
            pipe.write(answer)
        os._exit(0)  # no interpreter shutdown: nothing the student's definitions left behind runs after the reply
    os.close(write)
    chunks, deadline, late = [], time.monotonic() + job["timeout"], False
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read], [], [], left)[0]:
            late = True
            break
        chunk = os.read(read, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    for kill in (os.killpg, os.kill):  # the group, or the process if it had no time to make one
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if late:
        return {"status": "timeout"}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"status": "died", "message": f"exit status {os.waitstatus_to_exitcode(status)}"}


def main() -> None:
    """The sandboxed clean room of one notebook. For each request, one JSON line on stdin: load the trusted modules
    of its dialect, say "ready", run the call in a fresh forked process (`_call_in_child`) and reply with one JSON
    line. This process never runs the student's code, so every call starts from the same clean state. Whatever the
    student's code prints goes nowhere."""
    import warnings

    out = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    warnings.simplefilter("ignore")  # a race's SimtWarning is in the launch report already
    for line in sys.stdin:
        job = json.loads(line)
        _preload(job["dialect"])
        out.write("ready\n")
        out.flush()
        out.write(json.dumps(_call_in_child(job)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
