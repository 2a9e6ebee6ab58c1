"""A grading job's cgroups: a process limit, a memory limit, its own CPU share, and its CPU-time counter.

Made where this machine lets the grader create child cgroups (root, or a delegated cgroup v2
subtree); each controller that cannot be set up is simply absent, and the grade report says so.
"""

import os
import time
import uuid
from pathlib import Path

# The files that set each controller's limit: cgroup v1 (one hierarchy per controller) and v2 (one folder).
V1_SETTINGS = {"pids": ("pids.max",), "memory": ("memory.limit_in_bytes",), "cpu": ("cpu.shares",), "cpuacct": ()}
V2_SETTINGS = {"pids": ("pids.max",), "memory": ("memory.max", "memory.swap.max"), "cpu": ("cpu.weight",)}
V2_COUNTER = "cpu.stat"  # usage_usec: every controller-less v2 cgroup has it


def _hierarchy(controller: str) -> Path | None:
    """This process's cgroup folder for `controller`, if child cgroups can be made in it; None otherwise."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):  # cgroup v1: the hierarchy this controller is mounted in
            base = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
        elif controllers == "" and unified.exists():  # cgroup v2: one hierarchy for every controller
            base = Path("/sys/fs/cgroup", path.lstrip("/"))
        else:
            continue
        if base.is_dir() and os.access(base, os.W_OK):
            return base
    return None


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
        for controller, files in settings.items():
            base = _hierarchy(controller)
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
