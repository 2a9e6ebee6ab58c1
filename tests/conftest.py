"""Shared set-up: the grader's test exercises (chapter 99) live in tests/fixtures, not in the course."""

from pathlib import Path

import aisys_exercises
from aisys import device

# Triton kernels run in its interpreter on a CPU; it must be chosen before anything imports triton.
device.use_triton_interpreter()

FIXTURES = Path(__file__).parent / "fixtures"
# Exercises of chapter 99 are found as aisys_exercises.99-grader.<name>, after the course's.
aisys_exercises.__path__.append(str(FIXTURES / "exercises"))
