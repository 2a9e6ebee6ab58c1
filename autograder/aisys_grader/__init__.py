"""aisys_grader: the exercise checks, the notebook pipeline and (later) the sandboxed grading engine.

Checks are trusted code: when grading, they run in the grader's process and
reach student code only through `Student.call`, with plain data.
"""

from .checks import Check, Result, check, checks_for, compare_cases, require_gpu, run
from .compare import CheckFailure, CheckSkipped, assert_close
from .notebook import checker
from .student import InProcessStudent, Student

__all__ = ["Check", "CheckFailure", "CheckSkipped", "InProcessStudent", "Result", "Student", "assert_close", "check",
           "checker", "checks_for", "compare_cases", "require_gpu", "run"]
