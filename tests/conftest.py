"""Shared set-up: the grader's test exercises (chapter 99) live in tests/fixtures, not in the course; the device that
tests put tensors on, and the `gpu` mark for tests that need a CUDA GPU there."""

from pathlib import Path

import pytest

import aisys_exercises
from aisys import device

# Triton kernels run in its interpreter on a CPU; it must be chosen before anything imports triton.
device.use_triton_interpreter()

FIXTURES = Path(__file__).parent / "fixtures"
# Exercises of chapter 99 are found as aisys_exercises.99-grader.<name>, after the course's.
aisys_exercises.__path__.append(str(FIXTURES / "exercises"))


@pytest.fixture(scope="session")
def torch_device() -> str:
    """Where aisys runs here, "cpu" or "cuda" (AISYS_DEVICE decides): where a test puts the tensors it gives a
    Triton kernel, which runs in the interpreter on the CPU and compiled on the GPU."""
    return device.current()


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") and device.current() != "cuda":
        pytest.skip(f"needs a CUDA GPU ({device.describe()})")

