"""Test helpers: which processes a graded submission left running; a machine kept busy."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

def leftovers(*markers: str) -> list[str]:
    """Command lines of live processes (not this one) that contain any of `markers` (a job folder, say)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(proc.name) != os.getpid() and any(m in command for m in markers):
            found.append(f"{proc.name}: {command[:120]}")
    return found


@contextlib.contextmanager
def loaded(processes: int = 2, seconds: float = 900):
    """CPU-bound processes beside the test, as on a shared machine (ended on exit; each stops by itself after
    `seconds`)."""
    busy = [subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\n"
                              "while time.time() < end: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()
