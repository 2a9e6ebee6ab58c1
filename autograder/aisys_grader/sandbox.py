"""The sandbox student code runs in when grading: bubblewrap namespaces plus resource limits.

What is enforced, and how:
- no network: a network namespace of its own (`--unshare-net`);
- its own PID namespace: killing the sandbox kills every process in it, daemons included;
- a filesystem made of read-only binds of the system and the Python installation, a
  private /tmp, one writable job directory, and a copy of `aisys` without the modules
  the exercise's checks use as reference. solutions/, the hidden checks, the gradebook
  and other students' files are simply not there;
- limits on address space, CPU seconds, file size and core dumps (rlimits), and on the
  number of processes: RLIMIT_NPROC, which Linux counts per user. It does not bind
  root, so a grader running as root puts each job in a pids cgroup where it can make
  one, and otherwise runs the job as an unprivileged user of its own;
- a wall-clock kill, per cell and per notebook, by the engine (see kernel.py).
`Sandbox.enforced()` says which of these hold on this machine; every grade report carries it.
"""

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aisys

GIB = 2**30


class SandboxUnavailable(RuntimeError):
    """Grading cannot be sandboxed here, and unsandboxed grading was not asked for."""


@dataclass(frozen=True)
class Limits:
    address_space: int | None = 8 * GIB  # None on GPUs: the CUDA driver reserves huge virtual ranges
    cpu_seconds: int = 900
    file_size: int = 256 * 2**20
    processes: int = 128
    memory: int = 8 * GIB  # enforced through a memory cgroup where one can be made


def _find_bwrap() -> str | None:
    """bubblewrap, from PATH or an AISYS_BWRAP path (on machines where it is unpacked, not installed)."""
    return os.environ.get("AISYS_BWRAP") or shutil.which("bwrap")


def _cgroup_root(controller: str) -> Path | None:
    """This process's cgroup directory for `controller`, if we may create child cgroups in it."""
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):  # cgroup v1: one hierarchy per controller
            base = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
        elif controllers == "" and unified.exists() and controller in unified.read_text().split():
            base = Path("/sys/fs/cgroup", path.lstrip("/"))  # cgroup v2
        else:
            continue
        if base.is_dir() and os.access(base, os.W_OK):
            return base
    return None


class Cgroups:
    """Per-job pids and memory cgroups, where this machine lets us make them; `close` removes them."""

    SETTINGS = {"pids": ("pids.max",), "memory": ("memory.limit_in_bytes", "memory.max")}

    def __init__(self, limits: Limits):
        values = {"pids": limits.processes, "memory": limits.memory}
        self.dirs: dict[str, Path] = {}
        name = f"aisys-{uuid.uuid4().hex[:12]}"
        for controller, files in self.SETTINGS.items():
            root = _cgroup_root(controller)
            if root is None:
                continue
            directory = root / name
            try:
                directory.mkdir()
                present = [f for f in files if (directory / f).exists()]
                for f in present:
                    (directory / f).write_text(str(values[controller]))
            except OSError:
                present = []
            if present:
                self.dirs[controller] = directory
            else:
                self._remove(directory)

    def has(self, controller: str) -> bool:
        return controller in self.dirs

    def join(self) -> None:
        """Move the calling process into the job's cgroups (called in the child before exec)."""
        for directory in self.dirs.values():
            (directory / "cgroup.procs").write_text(str(os.getpid()))

    @staticmethod
    def _remove(directory: Path) -> None:
        try:
            directory.rmdir()
        except OSError:
            pass  # absent, or processes still leaving; an empty cgroup costs nothing

    def close(self) -> None:
        for directory in self.dirs.values():
            self._remove(directory)


@dataclass
class Sandbox:
    """How student code is started: `command(...)` wraps argv in bubblewrap; `preexec` applies the limits."""

    limits: Limits = field(default_factory=Limits)
    sandboxed: bool = True
    gpu: bool = False
    bwrap: str | None = field(default_factory=_find_bwrap)

    @classmethod
    def create(cls, *, allow_unsandboxed: bool = False, gpu: bool | None = None, limits: Limits | None = None):
        """The sandbox for this machine; SandboxUnavailable if bubblewrap cannot run and unsandboxed was not asked."""
        if gpu is None:
            gpu = any(Path("/dev").glob("nvidia[0-9]*"))
        if limits is None:
            limits = Limits(address_space=None) if gpu else Limits()
        sandbox = cls(limits=limits, sandboxed=True, gpu=gpu)
        problem = sandbox.problem()
        if problem is None:
            return sandbox
        if not allow_unsandboxed:
            raise SandboxUnavailable(f"{problem}. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), "
                                     "or grade without a sandbox by asking for it explicitly (--unsandboxed), "
                                     "knowing that submissions can then fake their grades.")
        return cls(limits=limits, sandboxed=False, gpu=gpu, bwrap=None)

    def problem(self) -> str | None:
        """Why bubblewrap cannot sandbox here, or None when it can."""
        if self.bwrap is None:
            return "bubblewrap (bwrap) is not installed"
        try:
            probe = subprocess.run([self.bwrap, "--unshare-all", "--ro-bind", "/", "/", "true"],
                                   capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap ({self.bwrap}) does not start: {error}"
        if probe.returncode != 0:
            return f"bubblewrap ({self.bwrap}) cannot create namespaces: {probe.stderr.decode(errors='replace').strip()}"
        return None

    @staticmethod
    def extra_python_paths() -> list[Path]:
        """PYTHONPATH folders the kernel needs too (packages unpacked outside the environment), never one
        that holds this course's code: an ancestor of aisys or aisys_grader would expose the checks."""
        course_code = [Path(aisys.__file__).resolve().parent, Path(__file__).resolve().parent,
                       Path(tempfile.gettempdir()).resolve() / "aisys-grade-"]  # other students' jobs
        paths = []
        for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            path = Path(entry).resolve() if entry else None
            if path is not None and path.is_dir() and not any(code.is_relative_to(path) for code in course_code):
                paths.append(path)
        return list(dict.fromkeys(paths))

    def _python_paths(self) -> list[Path]:
        """What the kernel needs to read: the Python installation, the environment and extra package folders
        (aisys comes in the shim, filtered)."""
        return sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), *self.extra_python_paths()})

    def command(self, job: Path, argv: list[str], shim: Path, env: dict[str, str], info_fd: int) -> list[str]:
        """argv wrapped in bubblewrap: `job` is the only writable place; `shim` (first on sys.path) holds
        the kernel's aisys_grader and the part of aisys the exercise allows. bubblewrap writes the
        sandbox's first process id to `info_fd`."""
        args = [self.bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--info-fd", str(info_fd),
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]
        for top in ("bin", "lib", "lib32", "lib64", "sbin"):
            path = Path("/") / top
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf"):
            if (Path("/etc") / name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for path in self._python_paths():
            args += ["--ro-bind", str(path), str(path)]
        args += ["--ro-bind", str(shim), str(shim), "--bind", str(job), str(job), "--chdir", str(job)]
        if self.gpu:
            for device in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind", str(device), str(device)]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return args + ["--", *argv]

    def job_uid(self, cgroups: Cgroups | None) -> int | None:
        """The unprivileged user a job runs as when grading as root without a pids cgroup, or None.

        Only where that user can read the Python installation (not one under /root, say)."""
        if not self.sandboxed or os.geteuid() != 0 or (cgroups is not None and cgroups.has("pids")):
            return None
        needed = [Path(sys.executable).resolve(), *self._python_paths(), Path(self.bwrap).resolve()]
        for path in needed:
            for folder in [path, *path.parents]:
                if folder.is_dir() and not folder.stat().st_mode & 0o001:
                    return None
        return 60000 + os.getpid() % 5000  # one per grading process: jobs running at once do not share a count

    def preexec(self, cgroups: Cgroups | None):
        """The function Popen runs in the child before exec: join the cgroups, set the rlimits."""
        limits = self.limits

        def apply():
            if cgroups is not None:
                cgroups.join()
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size, limits.file_size))
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            if limits.address_space is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limits.address_space, limits.address_space))

        return apply

    def enforced(self, cgroups: Cgroups | None = None, uid: int | None = None) -> dict[str, str]:
        """What is enforced on this machine, in words, for the grade report."""
        if not self.sandboxed:
            return {"sandbox": "NONE: graded without a sandbox at the instructor's request; "
                               "student code could read the checks and fake its grade"}
        root = os.geteuid() == 0
        has_pids = cgroups is not None and cgroups.has("pids")
        has_memory = cgroups is not None and cgroups.has("memory")
        return {
            "sandbox": "bubblewrap: own PID, network, IPC and user namespaces; read-only system; private /tmp",
            "processes": (f"at most {self.limits.processes} (pids cgroup)" if has_pids
                          else f"at most {self.limits.processes} (RLIMIT_NPROC, as unprivileged uid {uid})" if uid
                          else "NOT limited: grading as root, with no pids cgroup and no unprivileged user "
                               "able to read the Python installation" if root
                          else f"at most {self.limits.processes} (RLIMIT_NPROC)"),
            "memory": ("; ".join(filter(None, [
                f"{self.limits.memory / GIB:g} GiB (memory cgroup)" if has_memory else "",
                f"{self.limits.address_space / GIB:g} GiB address space per process" if self.limits.address_space else "",
            ])) or "NOT limited"),
            "cpu": f"{self.limits.cpu_seconds} CPU seconds per process",
            "files": f"{self.limits.file_size // 2**20} MiB per file, only in the job directory",
            "gpu": "GPU devices passed through" if self.gpu else "no GPU",
        }
