"""Shared set-up: the grader's test exercises (chapter 99) live in tests/fixtures, not in the course; the device that
tests put tensors on, and the `gpu` mark for tests that need a CUDA GPU there; AISYS_PIN_AUTOTUNE=1 on a GPU."""

import importlib
import os
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



# AISYS_PIN_AUTOTUNE=1 on a GPU: the autotuned kernels of these modules run the first config of their lists instead of
# compiling and timing every config for every new shape, which is most of the time their tests take there. The tests
# check each kernel's code (masks, ragged ends, grouped heads, causal offsets, dtypes) at many shapes; the configs
# compile the same code with other tile sizes, and the benchmarks, which autotune, check the chosen one's output
# against torch's and fail on a wrong row. Each module's first config fits every dtype and head size its tests use.
PIN_ENV = "AISYS_PIN_AUTOTUNE"
PINNED_MODULES = ("flash_attention", "flash_attention_backward", "layernorm", "paged_attention")


def pin_autotuning() -> list[str]:
    """Leave each autotuner of PINNED_MODULES its first config; the names of the kernels pinned."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    pinned = []
    for name in PINNED_MODULES:
        module = importlib.import_module(f"aisys.triton_kernels.{name}")
        for attribute, value in vars(module).items():
            while isinstance(value, KernelInterface) and not isinstance(value, Autotuner):
                value = value.fn  # an autotuner under @triton.heuristics; a plain kernel ends at its Python function
            if isinstance(value, Autotuner) and len(value.configs) > 1:
                value.configs = value.configs[:1]
                pinned.append(f"{name}.{attribute}")
    return pinned


PINNED = pin_autotuning() if os.environ.get(PIN_ENV) == "1" and device.current() == "cuda" else []


def pytest_report_header(config):
    if os.environ.get(PIN_ENV) == "1":
        return (f"{PIN_ENV}=1: first config only for {', '.join(PINNED)}" if PINNED
                else f"{PIN_ENV}=1 ignored: it pins configs on a GPU only (the interpreter runs one config anyway)")
