"""A grading job's cgroups: a process limit, a memory limit, its own CPU share, and its CPU-time counter.

Made where this machine lets the grader create child cgroups (root, or a delegated cgroup v2
subtree), inside the grader's own cgroup; each controller that cannot be set up is simply absent,
and the grade report says so.
"""

import os
import time
import uuid
from pathlib import Path

# The files that set each controller's limit: cgroup v1 (one hierarchy per controller) and v2 (one folder).
V1_SETTINGS = {"pids": ("pids.max",), "memory": ("memory.limit_in_bytes",), "cpu": ("cpu.shares",), "cpuacct": ()}
V2_SETTINGS = {"pids": ("pids.max",), "memory": ("memory.max", "memory.swap.max"), "cpu": ("cpu.weight",)}
V2_COUNTER = "cpu.stat"  # usage_usec: every controller-less v2 cgroup has it


GRADER_LEAF = "aisys-grader"  # cgroup v2: where the grader's own processes move, so that jobs can have controllers


def _own_cgroups() -> list[tuple[str, str]]:
    """(controllers, path) of each hierarchy this process is in, from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    return [(controllers, path) for _, controllers, path in (line.split(":", 2) for line in lines)]


def _v1_hierarchy(controller: str) -> Path | None:
    """cgroup v1: this process's folder in the hierarchy `controller` is mounted in, if children can be made in it."""
    for controllers, path in _own_cgroups():
        base = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
        if controller in controllers.split(",") and base.is_dir() and os.access(base, os.W_OK):
            return base
    return None


def _v2_base() -> Path | None:
    """cgroup v2: the folder jobs' cgroups go in, this process's own cgroup, with the controllers turned on for its
    children. The kernel allows that only while no process lives in it (unless it is the root), so its processes
    move first into a leaf of it, GRADER_LEAF: everything stays inside the cgroup the grader was given."""
    path = next((path for controllers, path in _own_cgroups() if controllers == ""), None)
    if path is None:
        return None
    base = Path("/sys/fs/cgroup", path.lstrip("/"))
    base = base.parent if base.name == GRADER_LEAF else base
    if not (base.is_dir() and os.access(base, os.W_OK)):
        return None
    try:
        wanted = set(V2_SETTINGS) & set((base / "cgroup.controllers").read_text().split())
        if wanted - set((base / "cgroup.subtree_control").read_text().split()):
            _turn_on(base, wanted)
    except OSError:
        pass  # the jobs' cgroups then count CPU time (cpu.stat), without the controllers' limits
    return base


def _turn_on(base: Path, controllers: set[str]) -> None:
    switch = " ".join(f"+{c}" for c in sorted(controllers))
    try:
        (base / "cgroup.subtree_control").write_text(switch)
        return
    except OSError:
        pass  # processes live in base: move them into the leaf, then try again
    leaf = base / GRADER_LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(3):  # processes may start while they move
        for pid in (base / "cgroup.procs").read_text().split():
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # gone already, or a kernel thread
    (base / "cgroup.subtree_control").write_text(switch)


class Cgroups:
    """The job's cgroups; `has(controller)` says which could be set up, `close` removes them."""

    def __init__(self, processes: int, memory: int):
        values = {"pids.max": processes, "memory.limit_in_bytes": memory, "memory.max": memory,
                  "memory.swap.max": 0, "cpu.shares": 1024, "cpu.weight": 100}  # the default share, of its own
        name = f"aisys-{uuid.uuid4().hex[:12]}"
        self.folders: dict[str, Path] = {}  # controller -> folder
        self.version = 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1
        settings = V2_SETTINGS if self.version == 2 else V1_SETTINGS
        made: dict[Path, Path] = {}
        v2_base = _v2_base() if self.version == 2 else None
        for controller, files in settings.items():
            base = v2_base if self.version == 2 else _v1_hierarchy(controller)
            if base is None:
                continue
            folder = made.get(base)
            if folder is None:
                try:
                    (base / name).mkdir()
                except OSError:
                    continue
                folder = made[base] = base / name
            try:
                for file in files:
                    (folder / file).write_text(str(values[file]))
            except OSError:
                continue  # this controller is not enabled here
            if all((folder / file).exists() for file in files):
                self.folders[controller] = folder
        if self.version == 2 and made:
            self.folders["cpuacct"] = next(iter(made.values()))  # cpu.stat counts in any v2 cgroup
        for folder in set(made.values()) - set(self.folders.values()):
            _remove(folder)

    def has(self, controller: str) -> bool:
        return controller in self.folders

    def join(self) -> None:
        """Move the calling process into the job's cgroups (called in the child before exec)."""
        for folder in set(self.folders.values()):
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_seconds(self) -> float | None:
        """CPU seconds used by every process of the job so far, or None without a CPU-time counter."""
        folder = self.folders.get("cpuacct")
        if folder is None:
            return None
        try:
            if self.version == 1:
                return int((folder / "cpuacct.usage").read_text()) / 1e9
            stat = dict(line.split() for line in (folder / V2_COUNTER).read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        except (OSError, ValueError, KeyError):
            return None

    def close(self) -> None:
        """Remove the cgroups; their processes must be gone (a memory cgroup may take a moment to empty)."""
        for folder in set(self.folders.values()):
            _remove(folder, patience=2.0)
        self.folders = {}


def _remove(folder: Path, patience: float = 0.0) -> None:
    deadline = time.monotonic() + patience
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left behind empty: it costs nothing
            time.sleep(0.02)
