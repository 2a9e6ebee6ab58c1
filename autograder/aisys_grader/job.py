"""One sandboxed process tree on the host: its folders, cgroups and user, how it starts, how it ends.

    modules = boundary.closure(spec.student_may_import, spec.reference)  # what of aisys the job holds
    with Job(sandbox, code={"__init__.py": shim}, modules=modules, ipc=True) as job:
        process = job.start([python, "-m", ...], env)
        ...
        job.cpu_seconds()      # every process of the job, from its cgroup (None where there is none)

The host side holds only what the grader puts there: `shim/` (the part of aisys_grader the sandbox
needs and, of aisys, exactly the modules `modules` names: default deny, see boundary.py; read-only
inside) and, for a kernel, `ipc/` (its connection file and ZMQ sockets, the one place both sides see).
Under root the job's user owns `ipc/` only until the kernel has bound its sockets (`lock_ipc`).
Whatever the student writes lives in the sandbox's own scratch tmpfs and goes with it; the folders
here are removed without recursion and within bounds.
"""

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import boundary
from .cgroups import Cgroups
from .sandbox import Sandbox

# One thread for numpy's and torch's pools: a job's CPU time is then its work, and jobs share the cores evenly.
THREADS = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
PASSED_ON = ("AISYS_DEVICE", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")  # the grader's choices, for the job too
LOG_LIMIT = 64 * 1024  # bytes of the sandbox's own stdout and stderr kept (the rest is read and dropped)
REMOVE_LIMIT = 100_000  # entries removed from a job's folders at most; more is left, and said


class Job:
    """Start with `with Job(...) as job:`; everything in the sandbox dies, and the folders go, on exit. `code`: the
    aisys_grader files of the shim, by name; `modules`: the aisys modules it holds (`boundary.closure`)."""

    def __init__(self, sandbox: Sandbox, *, code: dict[str, Path], modules=frozenset(), ipc: bool = False):
        self.sandbox, self.code, self.modules, self.wants_ipc = sandbox, code, frozenset(modules), ipc
        self.process: subprocess.Popen | None = None
        self.cgroups: Cgroups | None = None
        self.uid = sandbox.job_uid()
        self.pid_namespace: str | None = None
        self.notes: list[str] = []  # what went wrong on the host side (a folder not removed, say)
        self._log = collections.deque()
        self._log_size = 0
        self._reader: threading.Thread | None = None

    def __enter__(self):
        self.root = Path(tempfile.mkdtemp(prefix="aisys-grade-"))
        self.shim = self.root / "shim"
        package = self.shim / "aisys_grader"
        package.mkdir(parents=True)
        for name, source in self.code.items():
            shutil.copy(source, package / name)
        _copy_aisys(self.shim / "aisys", self.modules)
        self.ipc = self.root / "ipc" if self.wants_ipc else None
        if self.ipc is not None:
            self.ipc.mkdir()
        if self.uid is not None:  # the job's user may pass through root/ to ipc/ and own ipc/ (until lock_ipc)
            os.chmod(self.root, 0o711)
            if self.ipc is not None:
                os.chown(self.ipc, self.uid, self.uid)
        self.cgroups = self.sandbox.cgroups()
        return self

    def python_environment(self) -> dict[str, str]:
        """The environment of a Python started in the job: the shim's aisys_grader and aisys first on its path,
        then any package folders outside the installation."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": ":".join(map(str, [self.shim, *Sandbox.extra_python_paths()])),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            "LANG": "C.UTF-8",
            **THREADS,
        }
        return env | {name: os.environ[name] for name in PASSED_ON if name in os.environ}

    def start(self, argv: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
        """Run argv in the sandbox (or, unsandboxed, as a plain child process); its stdout and stderr are kept
        (the last LOG_LIMIT bytes) unless `popen` redirects them."""
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.STDOUT)
        popen.setdefault("stdin", subprocess.DEVNULL)
        if not self.sandbox.sandboxed:
            self.process = subprocess.Popen(argv, cwd=self.root, env=env, start_new_session=True, **popen)
        else:
            info_read, info_write = os.pipe()  # bubblewrap reports the sandbox's first process here
            writable = (self.ipc,) if self.ipc is not None else ()
            try:
                self.process = subprocess.Popen(
                    self.sandbox.command(argv, env=env, uid=self.uid, info_fd=info_write, binds=(self.shim,),
                                         writable=writable),
                    env={"PATH": "/usr/bin:/bin"}, start_new_session=True, pass_fds=(info_write,),
                    preexec_fn=self.sandbox.preexec(self.cgroups), **popen)
            finally:
                os.close(info_write)
            with os.fdopen(info_read) as info:
                self.pid_namespace = _pid_namespace(info.read())
        if popen["stdout"] is subprocess.PIPE and popen["stderr"] is subprocess.STDOUT:
            self._reader = threading.Thread(target=self._keep_log, daemon=True)
            self._reader.start()
        return self.process

    def _keep_log(self) -> None:
        """Read the sandbox's stdout and stderr to the end, keeping the last LOG_LIMIT bytes."""
        for chunk in iter(lambda: self.process.stdout.read1(65536), b""):
            self._log.append(chunk)
            self._log_size += len(chunk)
            while self._log_size - len(self._log[0]) >= LOG_LIMIT:
                self._log_size -= len(self._log.popleft())

    def log(self) -> str:
        """The end of what the sandbox printed (all of it, once its processes are gone)."""
        if self._reader is not None and not self.alive():
            self._reader.join(timeout=5)
        return b"".join(self._log).decode(errors="replace")[-3000:]

    def lock_ipc(self) -> None:
        """Under root: take ipc/ back from the job's user once the kernel has bound its sockets there, so the
        student can add nothing to the one host folder it can reach."""
        if self.uid is not None and self.ipc is not None:
            os.chown(self.ipc, 0, 0)
            os.chmod(self.ipc, 0o755)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by every process of the job so far (its cgroup's counter), or None."""
        return self.cgroups.cpu_seconds() if self.cgroups is not None else None

    def kill(self) -> None:
        """End the sandbox and every process in it, and wait until they are gone."""
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
        self.kill()
        if self.cgroups is not None:
            self.cgroups.close()
        left = remove_tree(self.root)
        if left:
            self.notes.append(f"{left} entries of the job folder {self.root} could not be removed")
        return False


def remove_tree(root: Path, limit: int = REMOVE_LIMIT) -> int:
    """Remove a folder and what is in it, without recursion, without following links and with one folder open at
    a time (a chain of folders thousands deep is fine), removing at most `limit` entries. Only for folders no
    process writes to any more. The number of entries left (0 when all is gone)."""
    removed, stack, fd = 0, [], None  # stack: [name in its parent, subfolders still to remove], root first
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(root, flags)
        stack.append([None, None])
        while stack and removed < limit:
            if stack[-1][1] is None:  # entering a folder: remove its files, note its subfolders
                folders = stack[-1][1] = []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.name)
                        elif removed < limit:
                            os.unlink(entry.name, dir_fd=fd)
                            removed += 1
            elif stack[-1][1]:  # down into the next subfolder
                name = stack[-1][1].pop()
                child = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                stack.append([name, None])
            else:  # empty now: up, and remove it
                name = stack.pop()[0]
                if name is None:
                    break
                parent = os.open("..", flags, dir_fd=fd)
                os.close(fd)
                fd = parent
                os.rmdir(name, dir_fd=fd)
                removed += 1
        if not stack or stack == [[None, []]]:
            os.close(fd)
            fd = None
            os.rmdir(root)
            return 0
    except OSError:
        pass  # counted below
    finally:
        if fd is not None:
            os.close(fd)
    return _count(root)


def _count(root: Path) -> int:
    """Entries left under root (at least 1 for root itself), counted without recursion, at most REMOVE_LIMIT."""
    count, folders = 1, [root]
    while folders and count < REMOVE_LIMIT:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    count += 1
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
        except OSError:
            continue
    return count if root.exists() else 0


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
                    with open(f"/proc/{entry.name}/stat") as stat_file:
                        if stat_file.read().rsplit(")", 1)[1].split()[0] != "Z":
                            pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _copy_aisys(target: Path, modules) -> None:
    """Of aisys, `aisys/__init__.py` and the files of `modules` (dotted names), exactly: default deny. `modules` is
    a `boundary.closure`, which holds the packages on the way to each module and what each imports."""
    for module in {"aisys", *modules}:
        source = boundary.source_file(module)
        copy = target / source.relative_to(boundary.SOURCE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, copy)
