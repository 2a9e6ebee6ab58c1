"""`aisys doctor`: what this machine has, and which exercise tracks can run on it."""

import importlib.metadata
import os
import platform
import subprocess
import sys
from dataclasses import dataclass

from . import device


@dataclass(frozen=True)
class Finding:
    item: str
    ok: bool
    detail: str


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_version(*packages: str) -> tuple[str, str] | None:
    for package in packages:
        if version := _version(package):
            return package, version
    return None


def _cpu() -> Finding:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return Finding("CPU", True, f"{model}, {os.cpu_count()} logical cores")


def _gpu() -> Finding:
    import torch

    if not torch.cuda.is_available():
        return Finding("GPU", False, "none visible to torch")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Finding("GPU", True, f"{len(names)} x {names[0]}, CUDA {torch.version.cuda}")


def _torch() -> Finding:
    import torch

    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    return Finding("torch", True, f"{torch.__version__} ({build})")


def _triton() -> Finding:
    version = _version("triton")
    if version is None:
        return Finding("Triton", False, "not installed")
    mode = "interpreter on the CPU (TRITON_INTERPRET=1)" if device.use_triton_interpreter() else "compiled for the GPU"
    return Finding("Triton", True, f"{version}, {mode}")


def _cupy() -> Finding:
    found = _first_version("cupy-cuda12x", "cupy-cuda13x", "cupy")
    if found is None:
        return Finding("CuPy", False, "not installed (GPU extra: pip install -e '.[gpu]')")
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        return Finding("CuPy", count > 0, f"{found[1]}, {count} GPU(s) usable")
    except Exception as error:  # CuPy imports without a driver and fails on first use
        return Finding("CuPy", False, f"{found[1]} installed but unusable here: {type(error).__name__}")


def _numba() -> Finding:
    version = _version("numba")
    if version is None:
        return Finding("numba", False, "not installed")
    cuda = _version("numba-cuda")
    return Finding("numba", True, f"{version}" + (f", numba-cuda {cuda}" if cuda else ", no numba-cuda (CPU only)"))


def _bubblewrap() -> Finding:
    """What the grader's own probe says (`aisys-grader sandbox`), asked in a process of its own: aisys never imports
    the grader, which may not be installed."""
    command = [sys.executable, "-m", "aisys_grader.cli", "sandbox"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Finding("bubblewrap", False, "the grader's sandbox probe did not answer within 120 s")
    if done.returncode == 0:
        return Finding("bubblewrap", True, done.stdout.strip())
    if "No module named 'aisys_grader'" in done.stderr:
        return Finding("bubblewrap", False, "the grader (aisys_grader) is not installed")
    said = (done.stdout.strip() or done.stderr.strip() or f"exit status {done.returncode}").splitlines()[-1]
    return Finding("bubblewrap", False, f"{said}: grading refuses to run unsandboxed unless asked to")


def _distributed() -> tuple[bool, bool]:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available(), dist.is_available() and dist.is_nccl_available()


def machine() -> list[Finding]:
    """What this machine has."""
    return [
        _cpu(),
        _gpu(),
        Finding("device", True, device.describe()),
        _torch(),
        _triton(),
        _numba(),
        _cupy(),
        _bubblewrap(),
    ]


def tracks(found: list[Finding]) -> list[Finding]:
    """Which kinds of exercise can run here, derived from what `machine()` found."""
    has = {f.item: f.ok for f in found}
    gpu = has["GPU"] and device.current() == "cuda"
    gloo, nccl = _distributed()
    return [
        Finding("reference code and CPU exercises", True, "numpy and torch on the CPU"),
        Finding("Triton kernels", has["Triton"],
                "compiled on the GPU" if gpu else "in the interpreter (slow, small sizes)"),
        Finding("thread-level CUDA kernels (numba's dialect)", True,
                "on the GPU through numba-cuda" if gpu and _version("numba-cuda") else
                "in the aisys SIMT simulator (reports coalescing, bank conflicts, divergence, races)"),
        Finding("CUDA C kernels", gpu and has["CuPy"], "CuPy RawKernel; without a GPU these checks are skipped"),
        Finding("collectives on real processes (gloo)", gloo, "torch.distributed, CPU processes"),
        Finding("collectives on GPUs (NCCL)", gpu and nccl, "torch.distributed with NCCL"),
        Finding("kernel benchmarks", gpu, "CUDA events against the hardware limit; needs a GPU"),
        Finding("sandboxed grading (instructors)", has["bubblewrap"], "bubblewrap plus rlimits"),
    ]


def render(title: str, findings: list[Finding]) -> str:
    width = max(len(f.item) for f in findings)
    lines = [title]
    lines += [f"  {'yes' if f.ok else 'no ':3}  {f.item:<{width}}  {f.detail}" for f in findings]
    return "\n".join(lines)


def report() -> str:
    found = machine()
    return render("This machine:", found) + "\n\n" + render("Exercise tracks:", tracks(found))
