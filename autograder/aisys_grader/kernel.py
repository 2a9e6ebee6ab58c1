"""A student's Jupyter kernel in the sandbox, and `KernelStudent`, the grader's side of the bridge.

The kernel is a real ipykernel, so notebooks run as they do in JupyterLab (magics
included). It talks to the grader over ZeroMQ IPC sockets in the job's `ipc/` folder,
the one place both sides can see (the sandbox has no network). Everything the
kernel sends is untrusted: a message over MESSAGE_LIMIT is refused by ZeroMQ itself
(and the kernel stopped), one that fails its signature check or does not decode is
dropped, and the grader reads only replies to its own requests and re-checks every value.

Time is measured on the job's clock: the CPU seconds of every process in the sandbox
(its cgroup's counter) where there is one, so a loaded machine or a classmate graded
alongside changes no verdict; each limit is also cut at `wall` seconds of wall time, for
code that waits rather than computes. Without the counter, the clock is the wall clock.
"""

import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

import nbformat
import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from . import boundary, bridge, cleanroom
from .cleanroom import REPLY_LIMIT
from .compare import CheckFailure
from .job import Job
from .sandbox import Sandbox
from .student import BridgeStudent

PACKAGE = Path(__file__).resolve().parent
OUTPUT_LIMIT = 1_000_000  # characters of output kept per cell; the rest is dropped with a note
MESSAGE_LIMIT = REPLY_LIMIT + 2**20  # bytes of any one message from the kernel, enforced by ZeroMQ
KERNEL_CODE = {"__init__.py": PACKAGE / "shim.py", "bridge.py": PACKAGE / "bridge.py", "plain.py": PACKAGE / "plain.py",
               "reps.py": PACKAGE / "reps.py"}
EXIT_GRACE = 2.0  # seconds a kernel whose connection closed has to be seen exiting, on a loaded machine too
WALL_FACTOR = 2.0  # where the clock counts CPU seconds, a limit of s seconds is also cut at this many times s of wall


class KernelDied(RuntimeError):
    """The kernel ended (os._exit, a crash, a kill) or had to be killed."""


@dataclass
class Execution:
    status: str  # "ok", "error", "timeout" or "dead"
    outputs: list = field(default_factory=list)
    seconds: float = 0.0  # on the job's clock


class SandboxedKernel:
    """Start with `with SandboxedKernel(sandbox) as kernel:`; everything in the sandbox dies on exit. Of aisys,
    the kernel holds only the modules of `allowed` and what they import, never one of `reference`
    (boundary.closure: a ValueError here where they cannot be separated); the bridge needs none."""

    def __init__(self, sandbox: Sandbox, allowed=(), reference=(), startup_timeout: float = 60):
        self.sandbox = sandbox
        self.job = Job(sandbox, code=KERNEL_CODE, modules=boundary.closure(allowed, reference), ipc=True)
        self.startup_timeout = startup_timeout
        self.client: BlockingKernelClient | None = None
        self.context: zmq.Context | None = None
        self.monitors: list = []
        self.death: str | None = None  # why the kernel is gone, once it is
        self.dropped = 0  # messages dropped: bad signature, not decodable

    def __enter__(self):
        self.job.__enter__()
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def metered(self) -> bool:
        """Whether the job's clock counts CPU seconds (its cgroup's counter) rather than wall seconds."""
        return self.job.cpu_seconds() is not None

    @property
    def unit(self) -> str:
        return "CPU seconds" if self.metered else "seconds"

    def clock(self) -> float:
        """The job's clock: its processes' CPU seconds where metered, else wall seconds."""
        seconds = self.job.cpu_seconds()
        return time.monotonic() if seconds is None else seconds

    def _start(self) -> None:
        connection = self.job.ipc / "kernel.json"
        write_connection_file(str(connection), transport="ipc", ip=str(self.job.ipc / "zmq"),
                              key=secrets.token_hex(32).encode())
        if self.job.uid is not None:
            os.chown(connection, self.job.uid, self.job.uid)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection),
                "--HistoryManager.enabled=False"]
        self.job.start(argv, self.job.python_environment())
        self.context = zmq.Context()
        self.context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_LIMIT)  # every socket of the client refuses larger ones
        self.client = BlockingKernelClient(connection_file=str(connection), context=self.context)
        self.client.load_connection_file()
        self.client.start_channels()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise KernelDied(f"the kernel did not start:\n{self.job.log()}")
            try:
                self.client.wait_for_ready(timeout=1)
                break
            except RuntimeError:
                continue
        else:
            raise KernelDied(f"the kernel did not answer within {self.startup_timeout:.0f} s:\n{self.job.log()}")
        self.job.lock_ipc()
        self.monitors = [channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                         for channel in (self.client.iopub_channel, self.client.shell_channel)]

    def _exits_within(self, seconds: float) -> bool:
        """Whether the kernel's process ends within `seconds` (it has closed its connection: is it exiting?)."""
        deadline = time.monotonic() + seconds
        while self.job.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self.job.alive()

    def alive(self) -> bool:
        return self.death is None and self.job.alive()

    def _disconnected(self) -> bool:
        """Whether the kernel's side closed a connection: a message over MESSAGE_LIMIT, or sockets it closed."""
        return any(monitor.poll(0) for monitor in self.monitors)

    def _message(self, channel, timeout: float):
        """The next message of a channel, or None. One that fails its signature check or does not decode is
        dropped: the kernel holds the signing key, so a signature says nothing but that it came from the kernel."""
        try:
            return channel.get_msg(timeout=timeout)
        except Empty:
            return None
        except Exception:  # jupyter_client raises ValueError, TypeError, KeyError ... for a malformed message
            self.dropped += 1
            return None

    def execute(self, code: str, seconds: float, wall: float | None = None, silent: bool = False) -> Execution:
        """Run code for at most `seconds` on the job's clock and `wall` wall seconds (default: as many); outputs as
        nbformat outputs. On 'timeout' the kernel may still be busy: see `recover`."""
        if not self.alive():
            return Execution("dead")
        wall = seconds if wall is None else wall
        start, start_wall = self.clock(), time.monotonic()
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False)
        outputs, size, replies, reply, idle = [], 0, 0, None, False
        while reply is None or not idle:
            if self.clock() - start > seconds or time.monotonic() - start_wall > wall:
                return Execution("timeout", outputs, self.clock() - start)
            # a kernel that exits closes its sockets a moment before its process is seen gone
            if self._disconnected() and not self._exits_within(EXIT_GRACE):
                self.kill(f"it sent a message larger than {MESSAGE_LIMIT // 2**20} MiB, or closed its "
                          "connection to the grader")
            if not self.alive():
                self.death = self.death or f"the kernel ended (exit status {self.job.process.poll()})"
                return Execution("dead", outputs, self.clock() - start)
            message = self._message(self.client.iopub_channel, 0.02)
            if message is not None and _parent(message) == msg_id:
                kind, content = message.get("msg_type"), _content(message)
                if kind == "status" and content.get("execution_state") == "idle":
                    idle = True
                elif kind == "clear_output":
                    outputs.clear()
                elif kind == "display_data" and bridge.MIME in _mapping(content.get("data")):
                    # a bridge reply: bounded by REPLY_LIMIT, not by what a cell may print
                    replies += len(str(content))
                    if replies <= REPLY_LIMIT:
                        outputs += _output(message)
                elif kind in ("stream", "display_data", "execute_result", "error"):
                    size += len(str(content))
                    if size <= OUTPUT_LIMIT:
                        outputs += _output(message)
            if reply is None:
                answer = self._message(self.client.shell_channel, 0)
                if answer is not None and _parent(answer) == msg_id:
                    reply = answer
        if size > OUTPUT_LIMIT:
            outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                  text=f"\n[output cut at {OUTPUT_LIMIT:,} characters]\n"))
        failed = _content(reply).get("status") != "ok" or any(o.output_type == "error" for o in outputs)
        return Execution("error" if failed else "ok", outputs, self.clock() - start)

    def forget_last_error(self) -> None:
        """Drop the references IPython keeps to the last exception: its frames may hold gigabytes
        (a MemoryError's list), and the rest of the notebook deserves that memory back."""
        self.execute("import gc, sys\nsys.last_traceback = sys.last_value = sys.last_exc = None\n"
                     "get_ipython().last_execution_result = None\ngc.collect()", 10, silent=True)

    def recover(self, seconds: float = 5) -> bool:
        """After a timeout: interrupt; if the kernel does not come back (SIGINT ignored), kill it."""
        if self.alive():
            self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))
            if self.execute("pass", seconds).status == "ok":
                return True
        self.kill("it did not stop when interrupted")
        return False

    def kill(self, why: str) -> None:
        """End the sandbox and every process in it, and wait until they are gone."""
        self.death = self.death or f"the kernel was stopped: {why}"
        self.job.kill()

    def __exit__(self, *exc):
        for monitor in self.monitors:
            monitor.close(linger=0)
        if self.client is not None:
            self.client.stop_channels()
        if self.context is not None:
            self.context.destroy(linger=0)
        self.kill("grading finished")
        self.job.__exit__(*exc)
        return False


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _content(message) -> dict:
    return _mapping(_mapping(message).get("content"))


def _parent(message) -> str | None:
    """The id of the request a message answers (None when the message does not say, or not as text)."""
    msg_id = _mapping(_mapping(message).get("parent_header")).get("msg_id")
    return msg_id if isinstance(msg_id, str) else None


def _output(message) -> list:
    """The message as a notebook output, or nothing when it does not make one."""
    try:
        return [nbformat.v4.output_from_msg(message)]
    except Exception:  # a malformed message from the kernel: KeyError, TypeError, ValueError ...
        return []


class Budget:
    """The notebook's time limit: `seconds` on the job's clock and, for code that waits rather than computes,
    WALL_FACTOR times as long in wall time (as long, where the job's clock is the wall clock)."""

    def __init__(self, kernel: SandboxedKernel, seconds: float = float("inf"), wall_factor: float = WALL_FACTOR):
        self.kernel, self.seconds = kernel, seconds
        self.wall_factor = wall_factor if kernel.metered else 1.0
        self.start, self.start_wall = kernel.clock(), time.monotonic()

    def allowance(self, limit: float) -> tuple[float, float]:
        """(seconds on the job's clock, wall seconds) for a step whose own limit is `limit`."""
        left = self.seconds - (self.kernel.clock() - self.start)
        wall_left = self.seconds * self.wall_factor - (time.monotonic() - self.start_wall)
        return max(0.0, min(limit, left)), max(0.0, min(limit * self.wall_factor, wall_left))

    def exhausted(self) -> bool:
        return min(self.allowance(float("inf"))) <= 0

    @property
    def why(self) -> str:
        return f"the notebook ran past its limit of {self.seconds:g} {self.kernel.unit}"


class KernelStudent(BridgeStudent):
    """The Student interface over a SandboxedKernel: each call crosses the bridge as plain data. profiled_call,
    traced_call and call_ranks run in the notebook's sandboxed clean room instead (`room`, a
    cleanroom.SandboxedRoom), on the source of the cells the engine has run in the kernel so far, which it appends
    to `sources`.

    Each call may take `call_timeout` seconds on the job's clock, or what is left of the notebook's
    `budget` when that is less; a call cut by the notebook's limit stops the kernel."""

    def __init__(self, kernel: SandboxedKernel, call_timeout: float = 60, budget: Budget | None = None,
                 exercise: str | None = None, room: cleanroom.SandboxedRoom | None = None):
        self.kernel = kernel
        self.call_timeout = call_timeout
        self.budget = budget or Budget(kernel)
        self.exercise = exercise  # for the aisys modules its check module lets students import
        self.sources: list[str] = []
        self.room = room

    @property
    def cpu_clock(self) -> bool:
        return self.kernel.metered

    def _reply(self, function: str, data: str, returns: str, harness: str | None = None) -> tuple[dict | None, float]:
        __tracebackhide__ = True
        if not self.kernel.alive():
            raise CheckFailure(f"`{function}` could not be called: {self.kernel.death}")
        nonce = secrets.token_hex(16)
        code = (f"__import__('aisys_grader.bridge', fromlist=['call']).call("
                f"get_ipython().user_ns, {function!r}, {data!r}, {returns!r}, {nonce!r}, {harness!r})")
        done = self.kernel.execute(code, *self.budget.allowance(self.call_timeout))
        if done.status == "timeout":
            if self.budget.exhausted():
                self.kernel.kill(self.budget.why)
                raise CheckFailure(f"`{function}` was stopped: {self.kernel.death}")
            self.kernel.recover()
            raise CheckFailure(f"`{function}` did not return within {self.call_timeout:g} {self.kernel.unit}")
        if done.status == "dead":
            raise CheckFailure(f"the kernel died while `{function}` ran: {self.kernel.death}")
        replies = [o.data[bridge.MIME] for o in done.outputs
                   if o.output_type == "display_data" and isinstance(o.get("data", {}).get(bridge.MIME), dict)
                   and o.data[bridge.MIME].get("nonce") == nonce]
        reply = replies[-1] if replies else None
        if reply is not None and len(str(reply.get("value", ""))) > REPLY_LIMIT:
            raise CheckFailure(f"the result of `{function}` is larger than {REPLY_LIMIT // 2**20} MiB")
        return reply, done.seconds

    def _room(self, function: str, dialect: str, data: str, returns: str, ranks: dict | None = None,
              generated: tuple[str, ...] = ()) -> dict | None:
        __tracebackhide__ = True
        if self.room is None:
            raise CheckFailure(f"`{function}` could not be run by the grader: this grading has no clean room")
        try:
            request = cleanroom.request([*self.sources, *generated], dialect, function, data, returns,
                                        modules=cleanroom.student_may_import(self.exercise), ranks=ranks)
        except ValueError as error:
            raise CheckFailure(f"`{function}` could not be run by the grader: {error}") from None
        # wall seconds: the room's own CPU is not the kernel's; what is left of the notebook's wall time bounds it
        _, wall = self.budget.allowance(self.call_timeout)
        reply, _, why = self.room.reply(request, wall)
        if self.budget.exhausted():
            self.kernel.kill(self.budget.why)
            raise CheckFailure(f"`{function}` was stopped: {self.kernel.death}")
        if reply is None:
            raise CheckFailure(f"`{function}` {why}")
        return reply
