"""Shared set-up: the grader's test exercises (chapter 99) live in tests/fixtures, not in the course."""

from pathlib import Path

import aisys_grader.exercises
from aisys import device

# Triton kernels run in its interpreter on a CPU; it must be chosen before anything imports triton.
device.use_triton_interpreter()

FIXTURES = Path(__file__).parent / "fixtures"
# Checks of chapter 99 are found as aisys_grader.exercises.ch99_grader.<name>.
aisys_grader.exercises.__path__.append(str(FIXTURES / "checks"))
