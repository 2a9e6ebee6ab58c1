"""Which device aisys runs on: automatic by default, overridden by the AISYS_DEVICE environment variable.

    AISYS_DEVICE=auto   a CUDA GPU if torch sees one, else the CPU (the default)
    AISYS_DEVICE=cpu    the CPU even where a GPU exists (Triton then runs in its interpreter)
    AISYS_DEVICE=cuda   the GPU, and a clear error where there is none

Every page and check reports `describe()`, so a reader always knows which was used.
"""

import os

from ._validate import one_of

ENV = "AISYS_DEVICE"
CHOICES = ("auto", "cpu", "cuda")


def requested() -> str:
    """The device asked for through AISYS_DEVICE ('auto' when unset)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    return one_of(f"environment variable {ENV}", value, CHOICES)


def gpu_available() -> bool:
    """Whether torch can use a CUDA GPU here."""
    import torch

    return torch.cuda.is_available()


def gpu_count() -> int:
    """CUDA GPUs aisys may use here: torch's count, or 0 with AISYS_DEVICE=cpu. Counting does not initialise CUDA,
    which processes forked afterwards (one rank a GPU) need."""
    import torch

    return torch.cuda.device_count() if requested() != "cpu" and gpu_available() else 0


def current() -> str:
    """'cuda' or 'cpu', following AISYS_DEVICE."""
    wanted = requested()
    if wanted == "cpu":
        return "cpu"
    if gpu_available():
        return "cuda"
    if wanted == "cuda":
        raise RuntimeError(f"{ENV}=cuda, but torch sees no CUDA GPU on this machine; unset it or set {ENV}=cpu")
    return "cpu"


def use_triton_interpreter() -> bool:
    """Triton kernels run in its interpreter on the CPU; set TRITON_INTERPRET before triton is imported."""
    on_cpu = current() == "cpu"
    if on_cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return on_cpu or os.environ.get("TRITON_INTERPRET") == "1"


def describe() -> str:
    """One line saying which device is used and why, e.g. 'cpu (AISYS_DEVICE=auto, no CUDA GPU found)'."""
    wanted, device = requested(), current()
    if device == "cuda":
        import torch

        return f"cuda: {torch.cuda.get_device_name(0)} ({ENV}={wanted})"
    reason = "requested" if wanted == "cpu" else "no CUDA GPU found"
    return f"cpu ({ENV}={wanted}, {reason})"
