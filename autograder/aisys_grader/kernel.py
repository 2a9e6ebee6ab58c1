"""A student's Jupyter kernel in the sandbox, and `KernelStudent`, the grader's side of the bridge.

The kernel is a real ipykernel, so notebooks run as they do in JupyterLab (magics
included). It talks to the grader over ZeroMQ IPC sockets in the job directory,
the one place both sides can see (the sandbox has no network). Everything the
kernel sends is untrusted: the grader reads only replies to its own requests,
caps their size, and re-checks every value.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

import aisys
import nbformat
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from . import bridge, cleanroom
from .compare import CheckFailure
from .sandbox import Cgroups, Sandbox
from .student import BridgeStudent

PACKAGE = Path(__file__).resolve().parent
OUTPUT_LIMIT = 1_000_000  # characters of output kept per cell; the rest is dropped with a note
REPLY_LIMIT = 256 * 2**20  # bytes of one bridge reply


class KernelDied(RuntimeError):
    """The kernel ended (os._exit, a crash, a kill) or had to be killed."""


@dataclass
class Execution:
    status: str  # "ok", "error", "timeout" or "dead"
    outputs: list = field(default_factory=list)
    seconds: float = 0.0


class SandboxedKernel:
    """Start with `with SandboxedKernel(sandbox) as kernel:`; everything in the sandbox dies on exit."""

    def __init__(self, sandbox: Sandbox, hidden_modules: set[str] = frozenset(), startup_timeout: float = 60):
        self.sandbox = sandbox
        self.hidden_modules = hidden_modules
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None
        self.client: BlockingKernelClient | None = None
        self.death: str | None = None  # why the kernel is gone, once it is
        self.cgroups: Cgroups | None = None
        self.uid: int | None = None
        self.pid_namespace: str | None = None

    def __enter__(self):
        self.root = Path(tempfile.mkdtemp(prefix="aisys-grade-"))
        self.job = self.root / "job"
        shim = self.root / "shim" / "aisys_grader"
        for folder in (self.job / "home", shim):
            folder.mkdir(parents=True)
        shutil.copy(PACKAGE / "shim.py", shim / "__init__.py")
        shutil.copy(PACKAGE / "bridge.py", shim / "bridge.py")
        shutil.copy(PACKAGE / "plain.py", shim / "plain.py")
        _copy_aisys(shim.parent / "aisys", self.hidden_modules)
        self.cgroups = Cgroups(self.sandbox.limits) if self.sandbox.sandboxed else None
        self.uid = self.sandbox.job_uid(self.cgroups)
        if self.uid is not None:  # the job runs as this user: it owns the job folder, and only that
            self.cgroups = None  # (it could not join root's cgroups)
            os.chmod(self.root, 0o711)
            for folder in (self.job, self.job / "home"):
                os.chown(folder, self.uid, self.uid)
        try:
            self._start(shim.parent)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _environment(self, shim: Path) -> dict[str, str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.job / "home"),
            # the shim's aisys_grader and aisys come first; then any package folders outside the installation
            "PYTHONPATH": os.pathsep.join(map(str, [shim, *Sandbox.extra_python_paths()])),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            "LANG": "C.UTF-8",
        }
        for name in ("AISYS_DEVICE", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES"):
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    def _start(self, shim: Path) -> None:
        connection = self.job / "kernel.json"
        write_connection_file(str(connection), transport="ipc", ip=str(self.job / "zmq"),
                              key=secrets.token_hex(32).encode())
        if self.uid is not None:
            os.chown(connection, self.uid, self.uid)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection), "--HistoryManager.enabled=False"]
        env = self._environment(shim)
        self.log = open(self.root / "kernel.log", "wb")
        if not self.sandbox.sandboxed:
            self.process = subprocess.Popen(argv, cwd=self.job, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        else:
            info_read, info_write = os.pipe()  # bubblewrap reports the sandbox's first process here
            try:
                self.process = subprocess.Popen(
                    self.sandbox.command(self.job, argv, shim, env, info_write), cwd=self.job,
                    env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, stdout=self.log,
                    stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(info_write,),
                    user=self.uid, group=self.uid, extra_groups=[] if self.uid is not None else None,
                    preexec_fn=self.sandbox.preexec(self.cgroups))
            finally:
                os.close(info_write)
            with os.fdopen(info_read) as info:
                self.pid_namespace = _pid_namespace(info.read())
        self.client = BlockingKernelClient(connection_file=str(connection))
        self.client.load_connection_file()
        self.client.start_channels()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise KernelDied(f"the kernel did not start:\n{self.startup_log()}")
            try:
                self.client.wait_for_ready(timeout=1)
                return
            except RuntimeError:
                continue
        raise KernelDied(f"the kernel did not answer within {self.startup_timeout:.0f} s:\n{self.startup_log()}")

    def startup_log(self) -> str:
        self.log.flush()
        return (self.root / "kernel.log").read_text(errors="replace")[-3000:]

    def alive(self) -> bool:
        return self.death is None and self.process is not None and self.process.poll() is None

    def execute(self, code: str, timeout: float, silent: bool = False) -> Execution:
        """Run code; outputs as nbformat outputs. On 'timeout' the kernel may still be busy: see `recover`."""
        if not self.alive():
            return Execution("dead")
        start = time.monotonic()
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False)
        outputs, size, replies, reply, idle = [], 0, 0, None, False
        while reply is None or not idle:
            if time.monotonic() - start > timeout:
                return Execution("timeout", outputs, time.monotonic() - start)
            if not self.alive():
                self.death = self.death or f"the kernel ended (exit status {self.process.poll()})"
                return Execution("dead", outputs, time.monotonic() - start)
            try:
                message = self.client.get_iopub_msg(timeout=0.02)
            except Empty:
                message = None
            if message and message["parent_header"].get("msg_id") == msg_id:
                kind = message["msg_type"]
                if kind == "status" and message["content"].get("execution_state") == "idle":
                    idle = True
                elif kind == "clear_output":
                    outputs.clear()
                elif kind == "display_data" and bridge.MIME in message["content"].get("data", {}):
                    # a bridge reply: bounded by REPLY_LIMIT, not by what a cell may print
                    replies += len(str(message["content"]))
                    if replies <= REPLY_LIMIT:
                        outputs.append(nbformat.v4.output_from_msg(message))
                elif kind in ("stream", "display_data", "execute_result", "error"):
                    size += len(str(message["content"]))
                    if size <= OUTPUT_LIMIT:
                        outputs.append(nbformat.v4.output_from_msg(message))
            if reply is None:
                try:
                    answer = self.client.get_shell_msg(timeout=0)
                    if answer["parent_header"].get("msg_id") == msg_id:
                        reply = answer
                except Empty:
                    pass
        if size > OUTPUT_LIMIT:
            outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                  text=f"\n[output cut at {OUTPUT_LIMIT:,} characters]\n"))
        failed = reply["content"].get("status") != "ok" or any(o.output_type == "error" for o in outputs)
        return Execution("error" if failed else "ok", outputs, time.monotonic() - start)

    def forget_last_error(self) -> None:
        """Drop the references IPython keeps to the last exception: its frames may hold gigabytes
        (a MemoryError's list), and the rest of the notebook deserves that memory back."""
        self.execute("import gc, sys\nsys.last_traceback = sys.last_value = sys.last_exc = None\n"
                     "get_ipython().last_execution_result = None\ngc.collect()", timeout=10, silent=True)

    def recover(self, timeout: float = 5) -> bool:
        """After a timeout: interrupt; if the kernel does not come back (SIGINT ignored), kill it."""
        if self.alive():
            self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))
            if self.execute("pass", timeout).status == "ok":
                return True
        self.kill("it did not stop when interrupted")
        return False

    def kill(self, why: str) -> None:
        """End the sandbox and every process in it, and wait until they are gone."""
        self.death = self.death or f"the kernel was stopped: {why}"
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        # The sandbox's PID namespace dies with its first process, but its members go asynchronously.
        deadline = time.monotonic() + 10
        while self.pid_namespace and time.monotonic() < deadline:
            members = _processes_in(self.pid_namespace)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.stop_channels()
        self.kill("grading finished")
        if self.cgroups is not None:
            time.sleep(0.05)
            self.cgroups.close()
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)
        return False


def _pid_namespace(info: str) -> str | None:
    """The PID namespace of the sandbox, from bubblewrap's info JSON ({"child-pid": N, ...})."""
    try:
        return os.readlink(f"/proc/{json.loads(info)['child-pid']}/ns/pid")
    except (ValueError, KeyError, OSError):
        return None


def _processes_in(namespace: str) -> list[int]:
    """Live processes of a PID namespace; zombies are dead already and wait only for their reaper."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") == namespace:
                    with open(f"/proc/{entry.name}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                            pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _copy_aisys(target: Path, hidden_modules: set[str]) -> None:
    """aisys without `hidden_modules` (dotted names): the references a student could otherwise just call."""
    source = Path(aisys.__file__).resolve().parent
    hidden = {source.joinpath(*name.split(".")[1:]) for name in hidden_modules}

    def ignore(folder, names):
        return [n for n in names if n == "__pycache__" or Path(folder, n).with_suffix("") in hidden
                or Path(folder, n) in hidden]

    shutil.copytree(source, target, ignore=ignore)


class KernelStudent(BridgeStudent):
    """The Student interface over a SandboxedKernel: each call crosses the bridge as plain data. profiled_call and
    call_ranks run in a sandboxed clean room of their own instead (cleanroom.SandboxedRoom), on the source of the
    cells the engine has run in the kernel so far, which it appends to `sources`."""

    def __init__(self, kernel: SandboxedKernel, call_timeout: float = 60, exercise: str | None = None):
        self.kernel = kernel
        self.call_timeout = call_timeout
        self.exercise = exercise  # for the aisys modules its check module lets students import
        self.sources: list[str] = []
        self.room = cleanroom.SandboxedRoom(kernel.sandbox, kernel.hidden_modules)

    def _reply(self, function: str, data: str, returns: str) -> tuple[dict | None, float]:
        __tracebackhide__ = True
        if not self.kernel.alive():
            raise CheckFailure(f"`{function}` could not be called: {self.kernel.death}")
        nonce = secrets.token_hex(16)
        code = (f"__import__('aisys_grader.bridge', fromlist=['call']).call("
                f"get_ipython().user_ns, {function!r}, {data!r}, {returns!r}, {nonce!r})")
        done = self.kernel.execute(code, self.call_timeout)
        if done.status == "timeout":
            self.kernel.recover()
            raise CheckFailure(f"`{function}` did not return within {self.call_timeout:g} s")
        if done.status == "dead":
            raise CheckFailure(f"the kernel died while `{function}` ran: {self.kernel.death}")
        replies = [o.data[bridge.MIME] for o in done.outputs
                   if o.output_type == "display_data" and isinstance(o.get("data", {}).get(bridge.MIME), dict)
                   and o.data[bridge.MIME].get("nonce") == nonce]
        reply = replies[-1] if replies else None
        if reply is not None and len(str(reply.get("value", ""))) > REPLY_LIMIT:
            raise CheckFailure(f"the result of `{function}` is larger than {REPLY_LIMIT // 2**20} MiB")
        return reply, done.seconds

    def close(self) -> None:
        """End the clean room (it ends by itself when this student is collected, or with the grader)."""
        self.room.close()

    def _room(self, function: str, dialect: str, data: str, returns: str, ranks: dict | None = None) -> dict | None:
        __tracebackhide__ = True
        try:
            request = cleanroom.request(self.sources, dialect, function, data, returns,
                                        modules=cleanroom.student_may_import(self.exercise), ranks=ranks)
        except ValueError as error:
            raise CheckFailure(f"`{function}` could not be run by the grader: {error}") from None
        reply, _, why = self.room.reply(request, self.call_timeout)
        if reply is None:
            raise CheckFailure(f"`{function}` {why}")
        return reply
