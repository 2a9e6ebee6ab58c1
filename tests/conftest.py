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


# Files whose tests share nothing but their code (no module fixture, nothing written outside tmp_path): pytest-xdist
# deals their tests out to the workers one by one. Every other file runs whole on one worker (`--dist loadgroup`),
# as its module fixtures (the built book, a graded class) expect. Without this, the exercises' thousand in-process
# gradings all ran on one of CI's two workers.
SPREAD = {"test_exercises.py", "test_nbgrader_roundtrip.py", "test_drill.py", "test_drill_cards.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
