"""The sandbox student code runs in when grading: bubblewrap namespaces, an unprivileged user, resource limits.

What is enforced, and how:
- no network, and its own PID, IPC, UTS and cgroup namespaces;
- never a capability and never host root, whoever starts the grader. Started by root, bubblewrap
  sets the sandbox up without a user namespace and runs a small launcher that mounts the job's
  scratch space, switches to an unprivileged user of the job's own and clears every capability
  before anything else runs. Started by another user, bubblewrap's own user namespace does it,
  and nested user namespaces are disabled. The launcher refuses to start the program unless
  /proc/self/status shows no capability, a non-zero uid and no_new_privs;
- a filesystem made of read-only binds of the system and the Python installation, a copy of
  the part of `aisys` the exercise lets students import (default deny: boundary.py; never a
  reference), and writable space only in a private scratch
  (home, /tmp, /dev/shm) of bounded size and, under root, bounded file count. It is a tmpfs in
  the sandbox's own mount namespace: it vanishes with the sandbox, so nothing a student writes
  is left on the host to clean up. solutions/, the hidden checks, the gradebook and other
  students' files are simply not there;
- limits on address space, CPU seconds, file size and core dumps (rlimits), on processes (a pids
  cgroup, else RLIMIT_NPROC, which counts per user: each job has its own), on memory (a memory
  cgroup) and a CPU share of its own beside other jobs (a cpu cgroup), where cgroups can be made;
- time limits per cell, call and notebook, measured on the job's CPU-time counter where a cgroup
  keeps one (engine.py, kernel.py).
`Sandbox.enforced()` says which of these hold on this machine; every grade report carries it.
"""

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import aisys

from .cgroups import Cgroups

GIB, MIB = 2**30, 2**20
HOME = "/home/student"  # the job's working folder and $HOME
JOB_UIDS = range(60000, 65000)  # unprivileged users for jobs, one per grading process


class SandboxUnavailable(RuntimeError):
    """Grading cannot be sandboxed here, and unsandboxed grading was not asked for."""


@dataclass(frozen=True)
class Limits:
    address_space: int | None = 8 * GIB  # None on GPUs: the CUDA driver reserves huge virtual ranges
    cpu_seconds: int = 900  # per process, enforced by the kernel: a backstop to the engine's time limits
    file_size: int = 256 * MIB
    processes: int = 128
    memory: int = 8 * GIB  # enforced through a memory cgroup where one can be made
    scratch_bytes: int = 1 * GIB  # what the job may write to each of home, /tmp and /dev/shm (tmpfs)
    scratch_files: int = 100_000  # files and folders in each (root only: tmpfs's nr_inodes)


# Runs first in the sandbox, with `python -I -S` (no site, no environment): bounds the file count of the
# scratch tmpfs and becomes the job's user (root only), clears every capability, checks that it did, then
# execs the program.
LAUNCHER = r"""
import ctypes, json, os, sys
config, argv = json.loads(sys.argv[1]), sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)

def fail(what):
    sys.stderr.write(f"aisys sandbox: {what}: {os.strerror(ctypes.get_errno())}\n")
    os._exit(125)

MS_REMOUNT, MS_NOSUID, MS_NODEV = 32, 2, 4
uid = config["uid"]
for target, options in config["remount"]:  # root only: bubblewrap's tmpfs, now bounded in file count too
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, options.encode()):
        fail(f"cannot bound {target}")
if uid is not None:
    os.chown(config["home"], uid, uid)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
header, sets = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # capability sets, version 3
if libc.capset(header, sets):
    fail("cannot clear the capabilities")
libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
held = [key for key in ("CapInh", "CapPrm", "CapEff", "CapAmb") if int(status[key], 16)]
if held or os.getuid() == 0 or os.geteuid() == 0 or status["NoNewPrivs"].strip() != "1":
    sys.stderr.write(f"aisys sandbox: privileges remain ({held}, uid {os.getuid()}); not starting\n")
    os._exit(125)
os.chdir(config["home"])
os.execv(argv[0], argv)
"""


def _find_bwrap() -> str | None:
    """bubblewrap, from PATH or an AISYS_BWRAP path (on machines where it is unpacked, not installed)."""
    return os.environ.get("AISYS_BWRAP") or shutil.which("bwrap")


@dataclass
class Sandbox:
    """How student code is started: `command(...)` wraps argv in bubblewrap; `preexec` applies the limits."""

    limits: Limits = field(default_factory=Limits)
    sandboxed: bool = True
    gpu: bool = False
    bwrap: str | None = field(default_factory=_find_bwrap)
    as_root: bool = field(default_factory=lambda: os.geteuid() == 0)  # then it switches to a job user of its own
    python: str = sys.executable  # runs the launcher

    @classmethod
    def create(cls, *, allow_unsandboxed: bool = False, gpu: bool | None = None, limits: Limits | None = None,
               probe: bool = True):
        """The sandbox for this machine; SandboxUnavailable if bubblewrap cannot run and unsandboxed was not asked.
        `probe=False` trusts an installed bubblewrap without starting Python in it first (half a second saved for
        one quick job, whose caller then calls problem() itself if the job's kernel does not start)."""
        if gpu is None:
            gpu = any(Path("/dev").glob("nvidia[0-9]*"))
        if limits is None:
            limits = Limits(address_space=None) if gpu else Limits()
        sandbox = cls(limits=limits, sandboxed=True, gpu=gpu)
        if not probe and sandbox.bwrap is not None:
            return sandbox
        problem = sandbox.problem()
        if problem is None:
            return sandbox
        if not allow_unsandboxed:
            raise SandboxUnavailable(f"{problem}. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), "
                                     "or grade without a sandbox by asking for it explicitly (--unsandboxed), "
                                     "knowing that submissions can then fake their grades.")
        return cls(limits=limits, sandboxed=False, gpu=gpu, bwrap=None)

    def problem(self) -> str | None:
        """Why bubblewrap cannot run a Python kernel here as an unprivileged user, or None when it can."""
        if self.bwrap is None:
            return "bubblewrap (bwrap) is not installed"
        return _probe(self.bwrap, self.as_root, tuple(map(str, self._python_paths())))

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

    def command(self, argv: list[str], *, env: dict[str, str], uid: int | None, info_fd: int,
                binds: tuple[Path, ...] = (), writable: tuple[Path, ...] = ()) -> list[str]:
        """argv wrapped in bubblewrap and the launcher. `binds` are read-only and `writable` read-write folders
        of the host, at the same paths inside. bubblewrap writes the sandbox's first process id to `info_fd`."""
        limits = self.limits
        args = [self.bwrap, "--die-with-parent", "--new-session", "--clearenv", "--info-fd", str(info_fd)]
        if self.as_root:  # no user namespace: the launcher needs root to bound its tmpfs and switch users
            args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                     "--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID",
                     "--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
        else:
            args += ["--unshare-all", "--unshare-user", "--disable-userns"]
        args += ["--proc", "/proc", "--dev", "/dev", "--dir", str(Path(HOME).parent)]
        scratch = ((HOME, "0700"), ("/tmp", "1777"), ("/dev/shm", "1777"))
        for target, mode in scratch:  # first: a folder of the job's bound below /tmp lies on top of it
            args += ["--size", str(limits.scratch_bytes), "--perms", mode, "--tmpfs", target]
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "lib", "lib32", "lib64", "sbin"):
            path = Path("/") / top
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        mounts = [*self._python_paths(), *binds, *writable]
        # bubblewrap makes a bind's missing parents private (0700): make them traversable by the job's user first
        for folder in sorted({parent for path in mounts for parent in path.parents if parent != Path("/")
                              and not parent.is_relative_to("/usr")} | {Path("/etc")}):
            args += ["--dir", str(folder)]
        for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf"):
            if (Path("/etc") / name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for path in [*self._python_paths(), *binds]:
            args += ["--ro-bind", str(path), str(path)]
        for path in writable:
            args += ["--bind", str(path), str(path)]
        bound = f"size={limits.scratch_bytes},nr_inodes={limits.scratch_files}"
        config = {"uid": uid, "home": HOME, "remount": [[target, bound] for target, _ in scratch] if uid else []}
        if self.gpu:
            for device in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind", str(device), str(device)]
        args += ["--remount-ro", "/"]  # the sandbox's own root: what bubblewrap made stays as it made it
        for key, value in {**env, "HOME": HOME}.items():
            args += ["--setenv", key, value]
        return args + ["--", self.python, "-I", "-S", "-c", LAUNCHER, json.dumps(config), *argv]

    def job_uid(self) -> int | None:
        """The unprivileged user a job runs as when the grader is root (one per grading process), else None."""
        return JOB_UIDS[os.getpid() % len(JOB_UIDS)] if self.sandboxed and self.as_root else None

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

    def cgroups(self) -> Cgroups | None:
        """A job's cgroups (None when not sandboxed)."""
        return Cgroups(self.limits.processes, self.limits.memory) if self.sandboxed else None

    def enforced(self, cgroups: Cgroups | None = None, uid: int | None = None) -> dict[str, str]:
        """What is enforced on this machine, in words, for the grade report; each line is backed by a test."""
        if not self.sandboxed:
            return {"sandbox": "NONE: graded without a sandbox at the instructor's request; "
                               "student code could read the checks and fake its grade"}
        has = cgroups.has if cgroups is not None else (lambda controller: False)
        limits = self.limits
        user = (f"as unprivileged uid {uid}, switched to by a launcher started as root" if uid is not None
                else f"as the grader's own unprivileged uid {os.geteuid()} in a user namespace, nested ones disabled")
        scratch = f"{limits.scratch_bytes / GIB:g} GiB"
        return {
            "sandbox": f"bubblewrap: own PID, network, IPC, UTS and cgroup namespaces; read-only system; "
                       f"no capabilities, never root: runs {user}",
            "processes": (f"at most {limits.processes} (pids cgroup)" if has("pids") else
                          f"at most {limits.processes} (RLIMIT_NPROC for uid {os.geteuid() if uid is None else uid})"),
            "memory": ("; ".join(filter(None, [
                f"{limits.memory / GIB:g} GiB (memory cgroup)" if has("memory") else "",
                f"{limits.address_space / GIB:g} GiB address space per process" if limits.address_space else "",
            ])) or "NOT limited"),
            "cpu": f"{limits.cpu_seconds} CPU seconds per process; " + (
                "a CPU share of its own beside other jobs (cpu cgroup)" if has("cpu")
                else "NO CPU share of its own: jobs graded at the same time compete for the cores"),
            "files": (f"writes only to a private scratch space (home, /tmp, /dev/shm) of {scratch} and "
                      f"{limits.scratch_files:,} files, gone with the sandbox; {limits.file_size // MIB} MiB per file"
                      if uid is not None else
                      f"writes only to home, /tmp and /dev/shm, private tmpfs of {scratch} each (file count NOT "
                      f"limited: not graded as root), gone with the sandbox; {limits.file_size // MIB} MiB per file"),
            "gpu": "GPU devices passed through" if self.gpu else "no GPU",
        }


@functools.cache
def _probe(bwrap: str, as_root: bool, python_paths: tuple[str, ...]) -> str | None:
    """Start Python in the sandbox as the job's user, importing what a kernel imports; why it failed, or None."""
    sandbox = Sandbox(bwrap=bwrap, as_root=as_root)
    read, write = os.pipe()
    try:
        env = {"LANG": "C.UTF-8", "PYTHONPATH": ":".join(map(str, Sandbox.extra_python_paths()))}
        argv = sandbox.command([sys.executable, "-c", "import ipykernel, numpy"], env=env, uid=sandbox.job_uid(),
                               info_fd=write)
        probe = subprocess.run(argv, capture_output=True, timeout=60, pass_fds=(write,))
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap ({bwrap}) does not start: {error}"
    finally:
        os.close(read)
        os.close(write)
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip()[-1500:]
        return f"bubblewrap ({bwrap}) cannot start Python as an unprivileged user here: {why}"
    return None
